"""Waiting for the machine to go quiet before a timed run, so runs do not time each other's tails
(a node refilling its warm process, a trial's processes exiting)."""

from __future__ import annotations

import time
from pathlib import Path


def _cpu_times() -> tuple[int, int]:
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return idle, sum(fields)


def idle_fraction(*, window: float = 1.0) -> float:
    idle_before, total_before = _cpu_times()
    time.sleep(window)
    idle_after, total_after = _cpu_times()
    total = total_after - total_before
    return (idle_after - idle_before) / total if total else 1.0


def wait_quiet(*, idle: float = 0.85, timeout: float = 30.0, window: float = 1.0) -> bool:
    """True once a `window`-second stretch was at least `idle` idle; False if none was."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if idle_fraction(window=window) >= idle:
            return True
    return False

