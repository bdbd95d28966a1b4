"""seccomp: the system calls and socket kinds no task ever needs, refused under every runtime.

    seccomp_bpf()                      # the compiled filter bubblewrap loads (`--seccomp FD`)
    seccomp_oci_profile(base=profile)  # an engine's own profile with the same refusals added

Namespaces are the wall (a task's own network, pids and mounts); this filter shrinks what a task
can ask of the kernel inside it, whatever Landlock the kernel has. The refusals, each answered
with an errno so a library that probes for a feature falls back rather than crashing:

- sockets: only Unix, IPv4, IPv6 and route netlink (what getaddrinfo asks the loopback with).
  MPTCP (which Landlock's TCP rules do not see), raw and packet sockets, vsock and every other
  family are refused;
- io_uring (its own path to sockets and files, outside these rules), bpf, userfaultfd, the
  kernel keyring and perf_event_open: attack surface a trial never uses.

ptrace stays: the task's pid namespace already holds only its own processes, and a workspace's
debugger needs it. Another architecture's system calls (int 0x80 on x86-64) kill the task.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
from dataclasses import dataclass
from typing import Any

IPPROTO_MPTCP = 262
SOCK_TYPE_MASK = 0xF  # the rest of `type` holds SOCK_NONBLOCK and SOCK_CLOEXEC
SOCK_RAW, SOCK_PACKET = 3, 10
AF_MAX = 46
NETLINK_ROUTE = 0
ALLOWED_FAMILIES = frozenset({socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK})
REFUSED_CALLS = (
    "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "userfaultfd", "keyctl",
    "add_key", "request_key", "perf_event_open",
)


@dataclass(frozen=True)
class Refusal:
    """One rule: `call` is refused with `errno` when every (argument, op, value[, mask]) holds."""

    call: str
    error: int
    args: tuple[tuple[int, str, int, int], ...] = ()


def refusals() -> tuple[Refusal, ...]:
    families = [
        Refusal("socket", errno.EAFNOSUPPORT, ((0, "eq", family, 0),))
        for family in range(AF_MAX) if family not in ALLOWED_FAMILIES
    ]
    return (
        *families,
        Refusal("socket", errno.EAFNOSUPPORT, ((0, "ge", AF_MAX, 0),)),
        Refusal("socket", errno.EPROTONOSUPPORT, ((2, "eq", IPPROTO_MPTCP, 0),)),
        # Raw IP (route netlink is SOCK_RAW too, and stays).
        *(Refusal("socket", errno.EPERM, ((0, "eq", family, 0),
                                          (1, "masked_eq", kind, SOCK_TYPE_MASK)))
          for family in (socket.AF_INET, socket.AF_INET6) for kind in (SOCK_RAW, SOCK_PACKET)),
        Refusal("socket", errno.EPROTONOSUPPORT,
                ((0, "eq", socket.AF_NETLINK, 0), (2, "ne", NETLINK_ROUTE, 0))),
        *(Refusal(call, errno.ENOSYS if call.startswith("io_uring") else errno.EPERM)
          for call in REFUSED_CALLS),
    )


@functools.cache
def seccomp_bpf() -> bytes:
    """The filter as the kernel loads it; compiled once per process."""
    import pyseccomp

    operators = {"eq": pyseccomp.EQ, "ne": pyseccomp.NE, "ge": pyseccomp.GE,
                 "masked_eq": pyseccomp.MASKED_EQ}
    rules = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    for refusal in refusals():
        # libseccomp's masked comparison takes the mask first, then the value.
        args = [pyseccomp.Arg(index, operators[op], mask, value) if op == "masked_eq"
                else pyseccomp.Arg(index, operators[op], value)
                for index, op, value, mask in refusal.args]
        rules.add_rule(pyseccomp.ERRNO(refusal.error), refusal.call, *args)
    # libseccomp writes the program to a file descriptor; a memfd keeps it off the disk.
    with os.fdopen(os.memfd_create("seccomp", os.MFD_CLOEXEC), "w+b") as handle:
        rules.export_bpf(handle)
        handle.seek(0)
        return handle.read()


def seccomp_memfd() -> int:
    """A descriptor to read the compiled filter from (bwrap reads it once, at start)."""
    fd = os.memfd_create("seccomp-filter", 0)
    os.write(fd, seccomp_bpf())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


OCI_OPERATORS = {"eq": "SCMP_CMP_EQ", "ne": "SCMP_CMP_NE", "ge": "SCMP_CMP_GE",
                 "masked_eq": "SCMP_CMP_MASKED_EQ"}


def seccomp_oci_profile(*, base: dict[str, Any]) -> dict[str, Any]:
    """An engine's seccomp profile (Docker's and podman's share the format) with the refusals
    put first: an errno rule wins over the profile's allow-rules for the same call."""
    added = []
    for refusal in refusals():
        args = [{"index": index, "value": mask if op == "masked_eq" else value,
                 "valueTwo": value if op == "masked_eq" else 0, "op": OCI_OPERATORS[op]}
                for index, op, value, mask in refusal.args]
        added.append({"names": [refusal.call], "action": "SCMP_ACT_ERRNO",
                      "errnoRet": refusal.error, "args": args})
    return {**base, "syscalls": [*added, *base.get("syscalls", [])]}
