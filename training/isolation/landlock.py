"""Landlock: what a task may touch once it knows which trial it is, before any user code runs.

A sandbox shows a warm task host every experiment's work dir and every upload (it is started
before its trial is known); at hand-off the host restricts itself, for good and for every process
it will spawn, to:

- read: the runtime (system, Python, `training/`, its environment) and its own model, dataset and
  built-in datasets;
- write: its own work dir, its private /tmp, and the few device nodes a task uses (with the GPUs
  it was granted);
- TCP: bind and connect only on its own gang's ports (so no database, broker, model server or
  web app, whatever runs on the host's loopback);
- signals and abstract Unix sockets: only within its own sandbox.

Landlock is an extra, not the wall: a task's namespaces (its own network, pids and mounts) and
the seccomp filter hold on any kernel. Each rule above is applied where the running kernel's ABI
has it (files from 1, TCP ports from 4, scopes from 6), up to `Confinement.abi`, the node's
choice (`PLATFORM_LANDLOCK_ABI`; 0 turns Landlock off, as a kernel without it would).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# Device nodes every task may read and write; GPUs are added per task.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
NVIDIA_SHARED_DEVICES = (
    "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
)
# What each ABI added that a task's confinement uses.
TCP_PORTS_ABI = 4
SCOPES_ABI = 6


@dataclass(frozen=True)
class Confinement:
    read: tuple[str, ...]
    write: tuple[str, ...]
    ports: tuple[int, ...]  # bound and connected to: the gang's own
    # Only connected to: a workspace's API port, which it must never listen on in the node's name.
    connect_ports: tuple[int, ...] = ()
    # The highest Landlock ABI to use (the node's, see landlock_abi); 0: none.
    abi: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"read": list(self.read), "write": list(self.write), "ports": list(self.ports),
                "connect_ports": list(self.connect_ports), "abi": self.abi}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Confinement:
        return cls(read=tuple(str(p) for p in data["read"]),
                   write=tuple(str(p) for p in data["write"]),
                   ports=tuple(int(str(p)) for p in data["ports"]),
                   connect_ports=tuple(int(str(p)) for p in data.get("connect_ports", [])),
                   abi=int(data.get("abi", 0)))


def kernel_landlock_abi() -> int:
    try:
        import landlockpy
    except ImportError:
        return 0
    try:
        return max(0, int(landlockpy.abi_version()))
    except OSError:  # ENOSYS or EOPNOTSUPP: no Landlock in this kernel, or it is disabled
        return 0


def landlock_abi(*, limit: int | None = None) -> int:
    """What a node confines tasks with: the kernel's ABI, at most `limit` (0: Landlock off)."""
    kernel = kernel_landlock_abi()
    return kernel if limit is None else max(0, min(kernel, limit))


def confine_apply(*, confinement: Confinement) -> None:
    """Restricts this process and all it will ever start; cannot be undone. A no-op where the
    node uses no Landlock: its namespaces and seccomp filter are the boundary then."""
    abi = min(confinement.abi, kernel_landlock_abi())
    if abi <= 0:
        return
    # landlock_restrict_self binds the calling thread only: any other would stay unconfined.
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        raise RuntimeError(f"Landlock must be applied with one thread, not {threads}.")
    from landlockpy import AccessFS, AccessNet, Ruleset, Scope, fs_for_abi

    everything = fs_for_abi(abi)
    read = AccessFS.READ_FILE | AccessFS.READ_DIR | AccessFS.EXECUTE
    # Links and device nodes are refused even where the task may write: a symlink in its work
    # dir is how a trial would point the platform (deploy, log reading) at someone else's files.
    write = everything & ~(AccessFS.MAKE_SYM | AccessFS.MAKE_CHAR | AccessFS.MAKE_BLOCK)
    file_only = (AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.EXECUTE
                 | AccessFS.TRUNCATE | AccessFS.IOCTL_DEV) & everything
    net = (AccessNet.BIND_TCP | AccessNet.CONNECT_TCP if abi >= TCP_PORTS_ABI
           else AccessNet.NONE)
    scoped = Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL if abi >= SCOPES_ABI else Scope.NONE
    # Rights past `abi` are left unhandled (allowed): what an older kernel would do.
    with Ruleset(handled_fs=everything, handled_net=net, scoped=scoped) as ruleset:
        for paths, access in ((confinement.read, read), (confinement.write, write)):
            for path in paths:
                if not os.path.exists(path):
                    continue  # e.g. /dev/tty, or a GPU node on a CPU host
                rights = access if os.path.isdir(path) else access & file_only
                ruleset.allow_path(path, rights)
        for port in sorted(set(confinement.ports)) if net else ():
            ruleset.allow_port(port, AccessNet.BIND_TCP | AccessNet.CONNECT_TCP)
        for port in sorted(set(confinement.connect_ports) - set(confinement.ports)) if net else ():
            ruleset.allow_port(port, AccessNet.CONNECT_TCP)
        ruleset.restrict()
