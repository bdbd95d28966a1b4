"""A Landlock ruleset: what a process may still read, write and reach once it restricts itself,
for good and for every process it will start.

Each right is applied where the running kernel's ABI has it (files from 1, TCP ports from 4,
scopes from 6), up to `Confinement.abi`, the caller's choice; rights past it are left unhandled
(allowed), as an older kernel would. A caller that needs a right to hold names the ABI that has
it (`minimum_abi`) and gets ConfinementError where the kernel is older.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# What each ABI added that a confinement uses.
TCP_PORTS_ABI = 4
SCOPES_ABI = 6


class ConfinementError(Exception):
    """This process cannot be confined as asked (threads running, or the kernel too old)."""


@dataclass(frozen=True)
class Confinement:
    read: tuple[str, ...] = ()  # read, list and execute
    # Everything but making links and device nodes: a symlink in a trial's work dir is how it
    # would point the platform (deploy, log reading) at someone else's files.
    write: tuple[str, ...] = ()
    # Everything but executing: the model server's profiler traces, the converter's output.
    write_data: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()  # read, write and ioctl
    ports: tuple[int, ...] = ()  # bound and connected to
    connect_ports: tuple[int, ...] = ()  # only connected to
    bind_ports: tuple[int, ...] = ()  # only bound
    abi: int = 0  # the highest Landlock ABI to use (see abi_probe); 0: none

    def as_dict(self) -> dict[str, object]:
        return {"read": list(self.read), "write": list(self.write),
                "write_data": list(self.write_data), "devices": list(self.devices),
                "ports": list(self.ports), "connect_ports": list(self.connect_ports),
                "bind_ports": list(self.bind_ports), "abi": self.abi}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Confinement:
        def paths(key: str) -> tuple[str, ...]:
            return tuple(str(p) for p in data.get(key, []))

        def ports(key: str) -> tuple[int, ...]:
            return tuple(int(str(p)) for p in data.get(key, []))

        return cls(read=paths("read"), write=paths("write"), write_data=paths("write_data"),
                   devices=paths("devices"), ports=ports("ports"),
                   connect_ports=ports("connect_ports"), bind_ports=ports("bind_ports"),
                   abi=int(data.get("abi", 0)))


def abi_probe(*, limit: int | None = None) -> int:
    """The kernel's Landlock ABI (0: none, or disabled), at most `limit`."""
    try:
        import landlockpy
    except ImportError:
        return 0
    try:
        kernel = max(0, int(landlockpy.abi_version()))
    except OSError:  # ENOSYS or EOPNOTSUPP: no Landlock in this kernel, or it is disabled
        return 0
    return kernel if limit is None else max(0, min(kernel, limit))


def confine_apply(*, confinement: Confinement, minimum_abi: int = 0) -> None:
    """Restricts this process and all it will ever start; cannot be undone. With `minimum_abi`
    0, a no-op where there is no Landlock to use. ConfinementError where more than one thread
    runs, or the ABI to use is below `minimum_abi`."""
    abi = abi_probe(limit=confinement.abi)
    if abi <= 0 and minimum_abi <= 0:
        return
    # landlock_restrict_self binds the calling thread only: any other would stay unconfined.
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        raise ConfinementError(f"Landlock must be applied with one thread, not {threads}.")
    if abi < minimum_abi:
        raise ConfinementError(f"Landlock ABI {abi} cannot confine this ({minimum_abi}+ needed).")
    from landlockpy import AccessFS, AccessNet, Ruleset, Scope, fs_for_abi

    everything = fs_for_abi(abi)
    file_only = (AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.EXECUTE
                 | AccessFS.TRUNCATE | AccessFS.IOCTL_DEV) & everything
    rights = (
        (confinement.read, AccessFS.READ_FILE | AccessFS.READ_DIR | AccessFS.EXECUTE),
        (confinement.write,
         everything & ~(AccessFS.MAKE_SYM | AccessFS.MAKE_CHAR | AccessFS.MAKE_BLOCK)),
        (confinement.write_data, everything & ~AccessFS.EXECUTE),
        (confinement.devices, (AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.IOCTL_DEV)
         & everything),
    )
    both = AccessNet.BIND_TCP | AccessNet.CONNECT_TCP
    net = both if abi >= TCP_PORTS_ABI else AccessNet.NONE
    scoped = Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL if abi >= SCOPES_ABI else Scope.NONE
    with Ruleset(handled_fs=everything, handled_net=net, scoped=scoped) as ruleset:
        for paths, access in rights:
            for path in paths:
                if not os.path.exists(path):
                    continue  # e.g. /dev/tty, or a GPU node on a CPU host
                ruleset.allow_path(path, access if os.path.isdir(path) else access & file_only)
        if net:
            ports = {p for p in confinement.ports if p}
            for port in sorted(ports):
                ruleset.allow_port(port, both)
            for port in sorted({p for p in confinement.connect_ports if p} - ports):
                ruleset.allow_port(port, AccessNet.CONNECT_TCP)
            for port in sorted({p for p in confinement.bind_ports if p} - ports):
                ruleset.allow_port(port, AccessNet.BIND_TCP)
        ruleset.restrict()
