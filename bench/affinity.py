"""Pinning process trees to CPUs, for runs measured side by side at the same time.

On this VM throughput drifts by ±10 % over seconds, so two runs made one after the other differ
by more than the overhead item 2 looks for. Run at the same moment on separate cores, both sides
see the same drift and their ratio keeps only what differs between them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from bench.cpu import stat_fields
from training.isolation.runtime import CONTAINER_RUNTIMES


def cpus_available() -> set[int]:
    return set(os.sched_getaffinity(0))


def process_tree(roots: Iterable[int]) -> list[int]:
    """The roots and every process descended from them (trial tasks live in sessions of their
    own, so process groups would miss them)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int(stat_fields(int(entry.name))[1])
        except (OSError, IndexError, ValueError):
            continue  # exited meanwhile
        children.setdefault(parent, []).append(int(entry.name))
    found, pending = [], list(roots)
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += children.get(pid, [])
    return found


def container_pids() -> list[int]:
    """Task containers' first processes under a docker/podman node: the engine starts them, so
    they are not in the platform's process tree (the stack's worker names the same engine)."""
    if os.environ.get("PLATFORM_TRIAL_RUNTIME") not in CONTAINER_RUNTIMES:
        return []
    from training.isolation.container_settings import ContainerSettings
    from training.isolation.containers import LABEL_NODE

    url = os.environ.get("PLATFORM_CONTAINER_ENGINE_URL", "unix:///run/podman/podman.sock")
    client = ContainerSettings(engine_url=url, node="").client()
    found = client.containers.list(filters={"label": LABEL_NODE})
    return [int(c.attrs["State"]["Pid"]) for c in found if c.attrs["State"].get("Pid")]


def processes_pin(pids: Iterable[int], *, cpus: set[int]) -> None:
    """Every thread of these processes onto `cpus`; threads and children they start later
    inherit it. Affinity is per thread on Linux, so setting the process's alone is not enough."""
    for pid in pids:
        with contextlib.suppress(OSError):
            for thread in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):  # a thread may end meanwhile
                    os.sched_setaffinity(int(thread.name), cpus)
