"""What a task host's bubblewrap sandbox shows, and what its task is then narrowed to.

Paths keep their host names inside, so a spec means the same on both sides. The sandbox holds:
the system (/usr read-only and the few /etc files name resolution and TLS need), the Python
runtime and `training/` read-only, a private /tmp, new pid/ipc/uts/user/cgroup namespaces, a
network namespace (its own or its gang's on this node: loopback only; a gang's across nodes:
its peers only), the seccomp filter, and `exposure`: the data roots a host may later be
narrowed into (every work dir and upload, for a warm host that does not know its trial yet;
exactly the trial's own, for a cold one).
"""

from __future__ import annotations

import functools
import glob
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from confinement import Confinement
from training.errors import InvalidInput
from training.isolation.dataset_mounts import local_roots_checked
from training.isolation.runtime import (
    BWRAP,
    TaskPython,
    client_dir,
    node_privileged,
    repo_root,
    system_binds,
)
from training.shard_schema import ShardedSource, local_roots
from training.spec import TrialSpec
from training.tf_config import ClusterPlan

# Read by resolvers, TLS and the dynamic linker; nothing of /etc that holds secrets.
ETC_FILES = (
    "/etc/hosts", "/etc/resolv.conf", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
    "/etc/ssl", "/etc/ca-certificates", "/etc/localtime", "/etc/ld.so.cache", "/etc/ld.so.conf",
    "/etc/ld.so.conf.d", "/etc/alternatives",
)
SANDBOX_UID = 1000
# A tmpfs of the sandbox's own, not the host's. A task may write only in SCRATCH inside it (its
# HOME and TMPDIR): a Landlock rule on all of /tmp would also cover any exposed host path that
# lives under /tmp, since bwrap mounts it inside this tmpfs.
PRIVATE_TMP = "/tmp"  # noqa: S108
SCRATCH = "/tmp/.trial"  # noqa: S108
SHARED_MEMORY = "/dev/shm"  # noqa: S108 - the sandbox's own /dev
# Device nodes every task may read and write; GPUs are added per task.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
NVIDIA_SHARED_DEVICES = (
    "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
)
# Where a task's network comes from (sandbox_command). NETWORK_GANG: its own, which the node's
# other tasks of its gang join (netns_ref).
NETWORK_OWN, NETWORK_GANG, NETWORK_HOST = "none", "gang", "host"
NETNS_PREFIX = "netns:"
USERNS_PART = ",user="


@dataclass(frozen=True)
class Exposure:
    """Data roots a sandbox shows: `write` read-write, `read` read-only."""

    write: tuple[str, ...] = ()
    read: tuple[str, ...] = ()
    # Of `read`: a registered dataset's folders, opened with no link followed below these
    # roots and bound by descriptor (dataset_mounts.py), never by name.
    pinned: tuple[str, ...] = ()
    pin_roots: tuple[str, ...] = ()

    def covers(self, *, write: tuple[str, ...], read: tuple[str, ...]) -> bool:
        return all(_under(p, self.write) for p in write) and all(
            _under(p, self.write + self.read) for p in read
        )


def _under(path: str, roots: tuple[str, ...]) -> bool:
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(Path(root).resolve()) for root in roots)


def runtime_paths(*, python: TaskPython) -> tuple[str, ...]:
    """The node's interpreter, its venv, the environment's venv, `training/`, `confinement/`
    and `tfp`."""
    paths = [sys.base_prefix, sys.prefix, *python.paths, str(repo_root() / "training"),
             str(repo_root() / "confinement"), str(client_dir())]
    return tuple(dict.fromkeys(paths))


@functools.cache
def bwrap_options() -> frozenset[str]:
    """The options this bubblewrap knows. Ubuntu 22.04's 0.6 and RHEL 9's 0.4 lack
    `--disable-userns` (the seccomp filter refuses user namespaces there alone), and have
    `--ro-bind-fd` only through their CVE-2024-42472 updates."""
    bwrap = shutil.which(BWRAP)
    if bwrap is None:
        return frozenset()
    usage = subprocess.run([bwrap, "--help"], capture_output=True, text=True, check=False,
                           timeout=30)
    return frozenset(re.findall(r"(?m)^\s+(--[a-z0-9-]+)", usage.stdout + usage.stderr))


def netns_ref(*, net: str, user: str = "") -> str:
    """A network namespace to join, by path; through a user namespace too on a node not run as
    root (the sandbox's own, which owns its network namespace and in which the node's user
    holds every capability, as its creator)."""
    return f"{NETNS_PREFIX}{net}{USERNS_PART + user if user else ''}"


def netns_ref_fds(network: str) -> tuple[int, ...]:
    """The node's descriptors a joining sandbox's nsenter needs open."""
    if not network.startswith(NETNS_PREFIX):
        return ()
    paths = network[len(NETNS_PREFIX):].split(USERNS_PART)
    return tuple(int(p.rsplit("/", 1)[1]) for p in paths if p.startswith("/proc/self/fd/"))


def _nsenter(network: str) -> list[str]:
    net, _, user = network[len(NETNS_PREFIX):].partition(USERNS_PART)
    # nsenter enters the user namespace first, so the network one is entered holding
    # CAP_SYS_ADMIN over it; the node's user stays itself (--preserve-credentials).
    via_user = [f"--user={user}", "--preserve-credentials"] if user else []
    return [shutil.which("nsenter") or "nsenter", *via_user, f"--net={net}", "--"]


def sandbox_command(*, python: TaskPython, exposure: Exposure, seccomp_fd: int,
                    network: str = NETWORK_OWN, pinned_fds: Mapping[str, int] | None = None,
                    disable_userns: bool | None = None) -> list[str]:
    """bwrap's argv. `network`: NETWORK_OWN (a namespace of its own, loopback only),
    NETWORK_GANG (the same, for the node's other tasks of its gang to join), a netns_ref (join
    that namespace: another task's of the same gang on this node, or a gang across nodes' own,
    gang_network.py), or NETWORK_HOST (the node's network, narrowed by Landlock: a gang across
    nodes on a node not run as root).
    `pinned_fds`: read paths bound from these open descriptors (dataset_mounts.mounts_open).
    `disable_userns`: bubblewrap's own refusal of user namespaces as well as the filter's (None:
    where this bubblewrap has it)."""
    if any(_under(SCRATCH, (path,)) or _under(path, (SCRATCH,))
           for path in exposure.write + exposure.read):
        raise ValueError(f"{SCRATCH} is the sandbox's scratch space; no data may live there.")
    bwrap = shutil.which(BWRAP) or BWRAP
    enter: list[str] = []
    if network.startswith(NETNS_PREFIX):
        enter = _nsenter(network)
    elif network not in (NETWORK_OWN, NETWORK_GANG, NETWORK_HOST):
        raise ValueError(f"Unknown sandbox network {network!r}.")
    if disable_userns is None:
        # bwrap's --disable-userns caps the sandbox's user namespace at the one it nests, and a
        # node not run as root joins its gang's sandbox through that namespace, making another:
        # there the filter alone refuses user namespaces to the task.
        disable_userns = "--disable-userns" in bwrap_options() and not (
            network == NETWORK_GANG and not node_privileged())
    argv = [
        *enter, bwrap, "--die-with-parent", "--new-session", "--as-pid-1",
        "--unshare-user",
        *(["--disable-userns"] if disable_userns else []),
        "--unshare-pid", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try",
        *(["--unshare-net"] if network in (NETWORK_OWN, NETWORK_GANG) else []),
        "--seccomp", str(seccomp_fd),
        "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
        *system_binds(),
    ]
    for path in ETC_FILES:
        argv += ["--ro-bind-try", path, path]
    argv += ["--ro-bind", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev"]
    argv += ["--tmpfs", PRIVATE_TMP, "--dir", SCRATCH]
    for device in sorted(glob.glob("/dev/nvidia*")):
        argv += ["--dev-bind", device, device]  # only the granted ones become usable (confine)
    for path in runtime_paths(python=python):
        argv += ["--ro-bind", path, path]
    pins = pinned_fds or {}
    if pins and "--ro-bind-fd" not in bwrap_options():
        raise InvalidInput(
            "A registered dataset's folders are bound by descriptor, which this node's "
            "bubblewrap cannot do: update it (0.10+, or the distribution's CVE-2024-42472 fix)."
        )
    for path in exposure.read:
        if path in pins:
            argv += ["--ro-bind-fd", str(pins[path]), path]
        else:
            argv += ["--ro-bind-try", path, path]
    for path in exposure.write:
        argv += ["--bind", path, path]
    return argv


def trial_paths(*, spec: TrialSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(write, read): the trial's own work dir; its uploads, dataset file and built-in data,
    and a registered dataset's local folders (checked by the platform when it was registered
    and when the trial was built, and here again, links not followed, as they are mounted:
    InvalidInput if one no longer passes)."""
    read = [p for p in (spec.model, spec.dataset) if p.startswith("/")]
    if spec.dataset_source:
        read += local_roots_checked(source=ShardedSource.from_dict(spec.dataset_source),
                                    roots=spec.dataset_roots)
    if spec.datasets_dir:
        read.append(spec.datasets_dir)
    return (spec.work_dir,), tuple(read)


def trial_exposure(*, spec: TrialSpec) -> Exposure:
    """What a cold host for this trial shows: `trial_paths`, its dataset folders pinned."""
    write, read = trial_paths(spec=spec)
    pinned = (local_roots(source=ShardedSource.from_dict(spec.dataset_source))
              if spec.dataset_source else ())
    return Exposure(write=write, read=read, pinned=pinned, pin_roots=tuple(spec.dataset_roots))


def task_confinement(*, spec: TrialSpec, python: TaskPython, plan: ClusterPlan,
                     gpus: tuple[int, ...], abi: int) -> Confinement:
    write, read = trial_paths(spec=spec)
    gpu_devices = (*NVIDIA_SHARED_DEVICES, *(f"/dev/nvidia{i}" for i in gpus)) if gpus else ()
    return Confinement(
        read=("/usr", "/etc", "/sys", "/proc", *runtime_paths(python=python), *read),
        write=(*write, SCRATCH, SHARED_MEMORY, "/dev/pts", *DEVICES, *gpu_devices),
        ports=tuple(sorted({t.port for t in plan.tasks if t.port})),
        connect_ports=tuple(sorted(_api_ports(spec=spec))),
        abi=abi,
    )


def _api_ports(*, spec: TrialSpec) -> set[int]:
    """A workspace's `tfp` reaches the platform's API (Landlock rules name ports, not hosts)."""
    url = urlsplit(spec.workspace.get("api_url", "")) if spec.workspace else None
    if url is None or not url.hostname:
        return set()
    return {url.port or (443 if url.scheme == "https" else 80)}
