"""How a node runs a trial's tasks: in a sandbox (the default) or as plain processes.

    runtime = runtime_for(name="sandbox")   # or "process", development only
    runtime.isolated                        # False for "process": flagged wherever trials show

A runtime starts *task hosts*: `python -m training.warm` processes that import TensorFlow, then
wait for one order (see warm.py). Under "sandbox" each host is a bubblewrap sandbox (new pid,
ipc, uts, user and cgroup namespaces; a read-only view of the Python runtime and `training/`,
nothing else of the repository or var/), and the order it is handed narrows it further with
Landlock before any user code runs: write access to its own work dir only, read access to its
own uploads and dataset, TCP only on its own gang's ports (confine.py).
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from training.errors import InvalidInput

RUNTIMES = ("sandbox", "process")
DEFAULT_RUNTIME = "sandbox"
# Debian's package; `make sandbox` installs it.
BWRAP = "bwrap"


@dataclass(frozen=True)
class TaskPython:
    """The interpreter a task host runs: the node's own, or an environment's venv layered on it.

    Warm hosts are kept per `key`, so a task only ever lands in a host of its own environment.
    """

    key: str = "node"
    executable: str = field(default_factory=lambda: sys.executable)
    # Read-only paths a sandbox must show besides the node's runtime (an environment's venv).
    paths: tuple[str, ...] = ()


def node_python() -> TaskPython:
    return TaskPython()


@dataclass(frozen=True)
class Runtime:
    name: str
    isolated: bool


def runtime_for(*, name: str) -> Runtime:
    if name not in RUNTIMES:
        raise InvalidInput(f"Unknown trial runtime {name!r}; choose one of {', '.join(RUNTIMES)}.")
    if name == "sandbox":
        runtime_sandbox_check()
    return Runtime(name=name, isolated=name != "process")


def runtime_sandbox_check() -> None:
    """Fails clearly when this machine cannot sandbox trials (no bwrap, no Landlock)."""
    from training.confine import landlock_abi

    if shutil.which(BWRAP) is None:
        raise InvalidInput(
            "The sandbox trial runtime needs bubblewrap: install Debian's `bubblewrap` "
            "(`make sandbox` does), or set PLATFORM_TRIAL_RUNTIME=process for development "
            "without isolation."
        )
    if landlock_abi() < 6:
        raise InvalidInput(
            "The sandbox trial runtime needs Landlock ABI 6 or later (Linux 6.12+: TCP port "
            f"rules, signal and abstract-socket scoping); this kernel has {landlock_abi()}."
        )


def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


if __name__ == "__main__":  # `make sandbox`: can this machine sandbox trials?
    try:
        runtime_sandbox_check()
    except InvalidInput as error:
        sys.exit(str(error))
