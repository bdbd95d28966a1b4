"""How a node runs a trial's tasks: in a sandbox (the default), in containers, or as processes.

    runtime = runtime_for(name="sandbox")   # runtime_factory.py; "docker"/"podman" (containers.py)
    runtime.isolated                        # False for "process": flagged wherever trials show

A runtime starts *task hosts*: `python -m training.trial.host` processes that import TensorFlow,
then wait for one order (see trial/host.py). Under "sandbox" each host is a bubblewrap sandbox (new
pid, ipc, uts, user and cgroup namespaces; a read-only view of the Python runtime and `training/`,
nothing else of the repository or var/), and the order it is handed narrows it further with
Landlock before any user code runs: write access to its own work dir only, read access to its own
uploads and dataset, TCP only on its own gang's ports (`confinement/`). The wall itself is made of
namespaces (a network of its own; across nodes, its gang's, which reaches only its peers, where the
node runs as root: gang_network.py) and a seccomp filter (seccomp.py), which hold on kernels
without Landlock too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from training.errors import InvalidInput
from training.isolation.gang_network import gang_network_check

if TYPE_CHECKING:
    from training.isolation.container_settings import ContainerSettings

RUNTIMES = ("sandbox", "docker", "podman", "process")
CONTAINER_RUNTIMES = ("docker", "podman")
DEFAULT_RUNTIME = "sandbox"
# Debian's package; `make sandbox` installs it.
BWRAP = "bwrap"
# Where a node run as root takes each gang's /30 from (gang_network.py); "": none, a gang across
# nodes shares the node's network, narrowed by Landlock.
DEFAULT_GANG_SUBNET = "100.64.0.0/16"


@dataclass(frozen=True)
class TaskPython:
    """The interpreter a task host runs: the node's own, or an environment's venv layered on it.

    Warm hosts are kept per `key`, so a task only ever lands in a host of its own environment.
    """

    key: str = "node"
    executable: str = field(default_factory=lambda: sys.executable)
    # Read-only paths a sandbox must show besides the node's runtime (an environment's venv).
    paths: tuple[str, ...] = ()
    # Under a container runtime: the environment's image ("" is the node's own, containers.py).
    image: str = ""


def node_python() -> TaskPython:
    return TaskPython()


@dataclass(frozen=True)
class Runtime:
    name: str
    isolated: bool
    containers: ContainerSettings | None = None  # the engine, under docker and podman
    # The Landlock ABI tasks are confined with (0: none; namespaces and seccomp still hold).
    landlock_abi: int = 0
    gang_subnet: str = DEFAULT_GANG_SUBNET
    # The sandbox's tasks forked from one process that imported TensorFlow (supervisor/forks.py)
    # rather than each importing it, where the node can join a sandbox (root).
    fork_server: bool = False
    # The machine's fork server, shared by its nodes (its socket's path; empty: each its own).
    fork_server_socket: str = ""

    @property
    def in_containers(self) -> bool:
        return self.name in CONTAINER_RUNTIMES


CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21


def node_privileged() -> bool:
    """Whether this node can join a sandbox's namespaces directly, mount into them and build a
    gang's network: CAP_SYS_ADMIN and CAP_NET_ADMIN in effect, as root on a host has them. Root
    in a container without them (compose's workers) is not: it takes the unprivileged ways,
    which rest on owning what it made."""
    try:
        with open("/proc/self/status") as status:
            effective = next(int(line.split()[1], 16) for line in status
                             if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        return False
    return all(effective >> cap & 1 for cap in (CAP_SYS_ADMIN, CAP_NET_ADMIN))


USR_MERGED = ("lib", "lib64", "bin", "sbin")


def system_binds() -> list[str]:
    """bwrap arguments showing the system's programs and libraries, read-only: /usr and its
    merged links, never all of `/`. A recursive bind of `/` copies every mount below it, and a
    container's overlay unmounted meanwhile (podman on the same node) fails the whole bind."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in USR_MERGED:
        target = Path("/") / name
        if target.is_symlink():
            argv += ["--symlink", str(target.readlink()), str(target)]
        else:
            argv += ["--ro-bind-try", str(target), str(target)]
    return argv


def runtime_sandbox_check(*, gang_subnet: str = DEFAULT_GANG_SUBNET) -> None:
    """Fails clearly when this machine cannot sandbox trials (no bwrap, no namespaces; on a
    node run as root, no `ip` or `nft` for gangs across nodes)."""
    if shutil.which(BWRAP) is None:
        raise InvalidInput(
            "The sandbox trial runtime needs bubblewrap: install Debian's `bubblewrap` "
            "(`make sandbox` does), or set PLATFORM_TRIAL_RUNTIME=process for development "
            "without isolation."
        )
    probe = subprocess.run(
        [BWRAP, "--unshare-all", "--unshare-user", *system_binds(), "true"],
        capture_output=True, text=True, timeout=30, check=False,
    )
    if probe.returncode != 0:
        raise InvalidInput(
            "The sandbox trial runtime needs user, network and pid namespaces, which this "
            f"machine refused to bubblewrap: {probe.stderr.strip()[:300]}"
        )
    if gang_subnet and node_privileged():
        gang_network_check()


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def client_dir() -> Path:
    """The platform's REST client (`tfp`), which a workspace runs: stdlib, requests and yaml,
    no platform code or secrets. Beside `training/` wherever the harness is (an image's too)."""
    return repo_root() / "platform" / "tfplatform_cli"


if __name__ == "__main__":  # `make sandbox`: can this machine sandbox trials?
    try:
        runtime_sandbox_check()
    except InvalidInput as error:
        sys.exit(str(error))
