"""A warm host holds nothing of anyone: its task's folders are mounted into it when its order
comes, by the node, from outside.

    mounts_inject(pid=host.task_pid(), write=(work_dir,), read=(model, dataset))

A warm sandbox is started before its trial is known, with the runtime alone (no work dir, no
upload, no dataset of any tenant). When the order arrives, a short-lived helper process of the
node (setns into a mount namespace takes a single-threaded caller) copies each path's mount
tree in the node's namespace (`open_tree`), makes the read-only ones read-only
(`mount_setattr`), enters the sandbox's mount namespace and attaches them at the same paths
(`move_mount`). No user code has run in that sandbox yet, so the mount points it creates there
(inside its namespace, at its root) are the node's own. A warm container (containers.py) is
filled the same way, through its first process' pid. It takes CAP_SYS_ADMIN over the sandbox's
namespaces: a node run as root (runtime.node_privileged); elsewhere there are no warm hosts.

    python -m training.isolation.mounts --pid N --write DIR ... --read PATH ...
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
from pathlib import Path

SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, 0o2000000
AT_FDCWD, AT_EMPTY_PATH, AT_RECURSIVE = -100, 0x1000, 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4
CLONE_NEWNS = 0x00020000
MNT_DETACH = 0x2
INJECT_TIMEOUT_SECONDS = 30.0


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def mounts_inject(*, pid: int, write: tuple[str, ...], read: tuple[str, ...]) -> None:
    """Mounts `write` read-write and `read` read-only into the sandbox whose pid 1 is `pid`;
    raises OSError with the helper's reason when it could not."""
    argv = [sys.executable, "-m", "training.isolation.mounts", "--pid", str(pid),
            *(item for path in write for item in ("--write", path)),
            *(item for path in read for item in ("--read", path))]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    result = subprocess.run(argv, capture_output=True, text=True, check=False, env=env,
                            cwd=Path(__file__).resolve().parents[2],
                            timeout=INJECT_TIMEOUT_SECONDS)
    if result.returncode != 0:
        raise OSError(f"could not mount the task's folders: {result.stderr.strip()[-500:]}")


def mounts_settled(*, pid: int) -> bool:
    """Whether the sandbox whose pid 1 is `pid` stands in its own root yet. Until bwrap (or the
    engine's runtime) pivots into it, the pid's root is still the node's: a mount made then lands
    in a tree the task never sees, and a look at its root sees the node's files."""
    try:
        root, own = os.stat(f"/proc/{pid}/root"), os.stat("/")
    except OSError:  # gone
        return False
    return (root.st_dev, root.st_ino) != (own.st_dev, own.st_ino)


def _check(result: int) -> int:
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return result


def mount_stage(*, fd: int, target: Path) -> None:
    """Attaches a read-only copy of the mount tree at the open folder `fd` (dataset_mounts'
    O_PATH descriptor) at `target`, an empty folder of the node's: what a container engine,
    which binds by name, then binds. No name is looked up between the check and the mount."""
    libc = ctypes.CDLL(None, use_errno=True)
    tree = _tree(libc=libc, path="", dir_fd=fd, read_only=True)
    try:
        _check(libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, str(target).encode(),
                            MOVE_MOUNT_F_EMPTY_PATH))
    finally:
        os.close(tree)


def mount_unstage(*, target: Path) -> None:
    """Detaches what `mount_stage` attached (a container's own bind of it stays)."""
    libc = ctypes.CDLL(None, use_errno=True)
    _check(libc.umount2(str(target).encode(), MNT_DETACH))


def _tree(*, libc: ctypes.CDLL, path: str, read_only: bool, dir_fd: int = AT_FDCWD) -> int:
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | (0 if path else AT_EMPTY_PATH)
    fd = _check(libc.syscall(SYS_OPEN_TREE, dir_fd, path.encode(), flags))
    flags = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (MOUNT_ATTR_RDONLY if read_only else 0)
    attr = _MountAttr(attr_set=flags)
    _check(libc.syscall(SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH | AT_RECURSIVE,
                        ctypes.byref(attr), ctypes.sizeof(attr)))
    return fd


def _inject(*, pid: int, write: list[str], read: list[str]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    trees: list[tuple[int, str, bool]] = []
    for paths, read_only in ((write, False), (read, True)):
        for path in paths:
            if not os.path.exists(path):
                continue  # as bwrap's -try binds: a root missing now is not shown
            trees.append((_tree(libc=libc, path=path, read_only=read_only), path,
                          os.path.isdir(path)))
    namespace = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    _check(libc.setns(namespace, CLONE_NEWNS))
    # Now at the host's own root: its mount points are made (and any link on the way followed)
    # there, never in the node's tree. A container's read-only root has empty tmpfs folders of
    # the node's at the data roots for them (containers.py).
    for fd, path, is_dir in trees:
        target = Path(path)
        if is_dir:
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch(exist_ok=True)
        _check(libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, path.encode(),
                            MOVE_MOUNT_F_EMPTY_PATH))


def _main() -> None:
    parser = argparse.ArgumentParser(prog="python -m training.isolation.mounts")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--write", action="append", default=[])
    parser.add_argument("--read", action="append", default=[])
    arguments = parser.parse_args()
    try:
        _inject(pid=arguments.pid, write=arguments.write, read=arguments.read)
    except OSError as error:
        sys.exit(str(error))


if __name__ == "__main__":
    _main()
