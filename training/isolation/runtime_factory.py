"""The one place a node's runtime is chosen and checked: what runtime.py's types name, made.

    runtime = runtime_for(name="sandbox", landlock_limit=None, gang_subnet="100.64.0.0/16")

It sits above runtime.py and containers.py so that none of them needs another's
function at import time (the engine check lives with the containers, the ABI with Landlock).
"""

from __future__ import annotations

from confinement import abi_probe
from training.errors import InvalidInput
from training.isolation.containers import ContainerSettings, engine_check
from training.isolation.runtime import (
    CONTAINER_RUNTIMES,
    DEFAULT_GANG_SUBNET,
    RUNTIMES,
    Runtime,
    runtime_sandbox_check,
)


def runtime_for(*, name: str, containers: ContainerSettings | None = None,
                landlock_limit: int | None = None,
                gang_subnet: str = DEFAULT_GANG_SUBNET, fork_server: bool = True,
                fork_server_socket: str = "") -> Runtime:
    """`landlock_limit`: the highest Landlock ABI to use (None: what the kernel has; 0: off).
    `gang_subnet`: see DEFAULT_GANG_SUBNET. `fork_server`, `fork_server_socket`: see Runtime."""
    if name not in RUNTIMES:
        raise InvalidInput(f"Unknown trial runtime {name!r}; choose one of {', '.join(RUNTIMES)}.")
    if name == "sandbox":
        runtime_sandbox_check(gang_subnet=gang_subnet)
    if name in CONTAINER_RUNTIMES:
        if containers is None:
            raise InvalidInput(f"The {name} runtime needs its engine's address.")
        engine_check(settings=containers)
    return Runtime(name=name, isolated=name != "process",
                   containers=containers if name in CONTAINER_RUNTIMES else None,
                   landlock_abi=abi_probe(limit=landlock_limit) if name != "process" else 0,
                   gang_subnet=gang_subnet, fork_server=fork_server and name == "sandbox",
                   fork_server_socket=fork_server_socket if name == "sandbox" else "")
