"""Entering a sandbox bubblewrap built, for a process the fork server made (forkserver.py).

bubblewrap's own process gets, on its way to exec: the sandbox's namespaces, no capabilities,
no new privileges, the seccomp filter. A forked process that joins the sandbox later must give
itself the same, in the same order, before any of the task's code runs:

    namespaces_join(pidfd=..., pid=...)   # in a single-threaded process, outside the sandbox
    os.fork()                             # the child is inside the sandbox's pid namespace
    privileges_drop(program=...)          # in that child: capabilities, no_new_privs, seccomp

Only what a root node can do: joining a mount namespace needs CAP_SYS_CHROOT where the joiner
lives, which a node not run as root lacks (it starts a cold host per task instead).
"""

from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
# Everything but the user namespace, joined first: bubblewrap nests the task's user namespace
# (--disable-userns) inside the one that owns the mounts, so a process already in the inner one
# holds no capability over them. The node's root holds it over all of them.
NAMESPACES = {"mnt": CLONE_NEWNS, "ipc": CLONE_NEWIPC, "uts": CLONE_NEWUTS,
              "net": CLONE_NEWNET, "pid": CLONE_NEWPID, "cgroup": CLONE_NEWCGROUP}

PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SOCK_FILTER_BYTES = 8

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _prctl(option: int, *arguments: int, what: str) -> None:
    # Every argument as a full unsigned long: the kernel refuses stray high bits in the unused
    # ones (PR_SET_NO_NEW_PRIVS checks they are zero).
    values = [ctypes.c_ulong(a) for a in (*arguments, 0, 0, 0, 0)[:4]]
    _check(_libc.prctl(ctypes.c_int(option), *values), what)


def _differs(*, pid: int, name: str) -> bool:
    return os.stat(f"/proc/{pid}/ns/{name}").st_ino != os.stat(f"/proc/self/ns/{name}").st_ino


def namespaces_join(*, pidfd: int, pid: int) -> None:
    """Joins the namespaces of the process `pidfd` refers to (its `pid` here names it in /proc;
    the descriptor proves it is still that process). Only those it does not share with this
    one: a gang across nodes keeps the node's network, and a kernel without cgroup namespaces
    leaves bubblewrap's "-try" unshared."""
    names = [name for name in NAMESPACES if _differs(pid=pid, name=name)]
    user = _differs(pid=pid, name="user")
    # pidfd_send_signal with no signal fails once the process is gone: the inodes read above
    # were then possibly another process', under a reused pid.
    signal.pidfd_send_signal(pidfd, 0)
    flags = 0
    for name in names:
        flags |= NAMESPACES[name]
    if flags:
        _check(_libc.setns(pidfd, flags), "setns")
    if user:
        _check(_libc.setns(pidfd, CLONE_NEWUSER), "setns(user)")


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32))


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def privileges_drop(*, program: bytes) -> None:
    """No capability left (bounding, ambient, effective, permitted, inheritable), no new
    privileges through exec, then the seccomp `program` (bubblewrap's `--seccomp` filter)."""
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for capability in range(last + 1):
        _prctl(PR_CAPBSET_DROP, capability, what="PR_CAPBSET_DROP")
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, what="PR_CAP_AMBIENT")
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _prctl(PR_SET_NO_NEW_PRIVS, 1, what="PR_SET_NO_NEW_PRIVS")
    if len(program) % SOCK_FILTER_BYTES or not program:
        raise OSError("The seccomp program is not a whole number of BPF instructions.")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // SOCK_FILTER_BYTES, ctypes.addressof(buffer))
    _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), what="PR_SET_SECCOMP")
