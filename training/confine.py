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
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Device nodes every task may read and write; GPUs are added per task.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
NVIDIA_SHARED_DEVICES = (
    "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
)
# Minimum: TCP port rules arrived in ABI 4, signal and abstract-socket scoping in ABI 6.
MINIMUM_ABI = 6


@dataclass(frozen=True)
class Confinement:
    read: tuple[str, ...]
    write: tuple[str, ...]
    ports: tuple[int, ...]  # bound and connected to: the gang's own
    # Only connected to: a workspace's API port, which it must never listen on in the node's name.
    connect_ports: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, list[object]]:
        return {"read": list(self.read), "write": list(self.write), "ports": list(self.ports),
                "connect_ports": list(self.connect_ports)}

    @classmethod
    def from_dict(cls, data: dict[str, list[object]]) -> Confinement:
        return cls(read=tuple(str(p) for p in data["read"]),
                   write=tuple(str(p) for p in data["write"]),
                   ports=tuple(int(str(p)) for p in data["ports"]),
                   connect_ports=tuple(int(str(p)) for p in data.get("connect_ports", [])))


def landlock_abi() -> int:
    try:
        import landlockpy
    except ImportError:
        return 0
    return int(landlockpy.abi_version())


def confine_apply(*, confinement: Confinement) -> None:
    """Restricts this process and all it will ever start; cannot be undone."""
    from landlockpy import AccessFS, AccessNet, Ruleset, Scope, fs_for_abi

    abi = landlock_abi()
    if abi < MINIMUM_ABI:
        raise RuntimeError(f"Landlock ABI {abi} is too old to confine a trial ({MINIMUM_ABI}+).")
    everything = fs_for_abi(abi)
    read = AccessFS.READ_FILE | AccessFS.READ_DIR | AccessFS.EXECUTE
    # Links and device nodes are refused even where the task may write: a symlink in its work
    # dir is how a trial would point the platform (deploy, log reading) at someone else's files.
    write = everything & ~(AccessFS.MAKE_SYM | AccessFS.MAKE_CHAR | AccessFS.MAKE_BLOCK)
    file_only = (AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.EXECUTE
                 | AccessFS.TRUNCATE | AccessFS.IOCTL_DEV)
    with Ruleset(handled_fs=everything, handled_net=AccessNet.BIND_TCP | AccessNet.CONNECT_TCP,
                 scoped=Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL) as ruleset:
        for paths, access in ((confinement.read, read), (confinement.write, write)):
            for path in paths:
                if not os.path.exists(path):
                    continue  # e.g. /dev/tty, or a GPU node on a CPU host
                rights = access if os.path.isdir(path) else access & file_only
                ruleset.allow_path(path, rights)
        for port in sorted(set(confinement.ports)):
            ruleset.allow_port(port, AccessNet.BIND_TCP | AccessNet.CONNECT_TCP)
        for port in sorted(set(confinement.connect_ports) - set(confinement.ports)):
            ruleset.allow_port(port, AccessNet.CONNECT_TCP)
        ruleset.restrict()
