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
  kernel keyring and perf_event_open: attack surface a trial never uses;
- symbolic links, which the platform could later be led through;
- new user namespaces (`unshare`/`clone` with CLONE_NEWUSER; `clone3`, whose flags a filter
  cannot read, answers ENOSYS so libc falls back to `clone`): a task would hold every
  capability inside one, and reach the kernel code those guard. Under bubblewrap it is what
  `--disable-userns` does, for the releases that lack it (0.6 on Ubuntu 22.04, 0.4 on RHEL 9);
  podman's default profile allows them.

ptrace stays: the task's pid namespace already holds only its own processes, and a workspace's
debugger needs it. Another architecture's system calls (int 0x80 on x86-64) kill the task.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
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
    # A link planted in a work dir would point the platform (deploys, artifacts, log reading)
    # at another tenant's files; Landlock refuses them too, where the kernel has it.
    "symlink", "symlinkat",
)


CLONE_NEWUSER = 0x10000000


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


def userns_refusals() -> tuple[Refusal, ...]:
    """No user namespace of its own: the kernel's largest surface a task could otherwise reach
    with full capabilities (inside it). The flags are the first argument of both calls."""
    newuser = ((0, "masked_eq", CLONE_NEWUSER, CLONE_NEWUSER),)
    return (Refusal("unshare", errno.EPERM, newuser), Refusal("clone", errno.EPERM, newuser),
            Refusal("clone3", errno.ENOSYS))


@functools.cache
def seccomp_bpf() -> bytes:
    """The filter as the kernel loads it; compiled once per process."""
    import pyseccomp

    operators = {"eq": pyseccomp.EQ, "ne": pyseccomp.NE, "ge": pyseccomp.GE,
                 "masked_eq": pyseccomp.MASKED_EQ}
    rules = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    for refusal in (*refusals(), *userns_refusals()):
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


def _oci_rule(*, action: str, args: tuple[tuple[int, str, int, int], ...] = (),
              error: int = 0, call: str = "socket") -> dict[str, Any]:
    rule: dict[str, Any] = {"names": [call], "action": action, "args": [
        {"index": index, "value": mask if op == "masked_eq" else value,
         "valueTwo": value if op == "masked_eq" else 0, "op": OCI_OPERATORS[op]}
        for index, op, value, mask in args]}
    return rule | ({"errnoRet": error} if error else {})


def _oci_socket_rules() -> list[dict[str, Any]]:
    """`socket` for a profile whose default refuses: libseccomp lets a broader allow win over a
    narrower refusal, so the allows are written disjoint from the refusals (runc refuses a
    profile whose rules on one argument overlap otherwise). Other families meet the profile's
    default refusal (ENOSYS). Raw and packet sockets need CAP_NET_RAW, which no task container
    has."""
    inet = (socket.AF_INET, socket.AF_INET6)
    return [
        _oci_rule(action="SCMP_ACT_ALLOW", args=((0, "eq", socket.AF_UNIX, 0),)),
        *(_oci_rule(action="SCMP_ACT_ALLOW",
                    args=((0, "eq", family, 0), (2, "ne", IPPROTO_MPTCP, 0))) for family in inet),
        _oci_rule(action="SCMP_ACT_ALLOW",
                  args=((0, "eq", socket.AF_NETLINK, 0), (2, "eq", NETLINK_ROUTE, 0))),
        *(_oci_rule(action="SCMP_ACT_ERRNO", error=errno.EPROTONOSUPPORT,
                    args=((0, "eq", family, 0), (2, "eq", IPPROTO_MPTCP, 0))) for family in inet),
        _oci_rule(action="SCMP_ACT_ERRNO", error=errno.EPROTONOSUPPORT,
                  args=((0, "eq", socket.AF_NETLINK, 0), (2, "ne", NETLINK_ROUTE, 0))),
    ]


def _oci_userns_rules() -> list[dict[str, Any]]:
    """podman's default profile allows user namespaces (for containers in containers): here
    `clone` and `unshare` pass only without CLONE_NEWUSER, written disjoint as above."""
    rules = []
    for call in ("clone", "unshare"):
        rules += [
            _oci_rule(call=call, action="SCMP_ACT_ALLOW",
                      args=((0, "masked_eq", 0, CLONE_NEWUSER),)),
            _oci_rule(call=call, action="SCMP_ACT_ERRNO", error=errno.EPERM,
                      args=((0, "masked_eq", CLONE_NEWUSER, CLONE_NEWUSER),)),
        ]
    return [*rules, {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS}]


def seccomp_oci_profile(*, base: dict[str, Any]) -> dict[str, Any]:
    """An engine's seccomp profile (Docker's and podman's share the format) with the same
    refusals: the calls named here leave the profile's own rules and get ours alone."""
    ours = {refusal.call for refusal in (*refusals(), *userns_refusals())}
    kept = []
    for rule in base.get("syscalls", []):
        names = [name for name in rule.get("names", []) if name not in ours]
        if names:
            kept.append({**rule, "names": names})
    calls = [{"names": [call], "action": "SCMP_ACT_ERRNO",
              "errnoRet": errno.ENOSYS if call.startswith("io_uring") else errno.EPERM}
             for call in REFUSED_CALLS]
    return {**base, "syscalls": [*_oci_socket_rules(), *_oci_userns_rules(), *calls, *kept]}


# containers-common's default profile: podman's own, and moby's with podman's changes.
ENGINE_PROFILES = (Path("/usr/share/containers/seccomp.json"),)


def seccomp_profile_write(*, directory: Path) -> str:
    """The engine's default profile plus the refusals, as a file the engine reads (it runs on
    this machine: the node's folders are what it mounts, too); "" where no default profile is
    installed (the engine then applies its own built-in one, without the refusals)."""
    base = next((path for path in ENGINE_PROFILES if path.is_file()), None)
    if base is None:
        return ""
    text = json.dumps(seccomp_oci_profile(base=json.loads(base.read_text())))
    # Named by content: a node upgraded in place never keeps an older profile's rules.
    path = directory / f"seccomp-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.exists():
        partial = directory / f".seccomp.{os.getpid()}.partial"
        partial.write_text(text)
        partial.replace(path)
    return str(path)
