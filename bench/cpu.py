"""CPU time spent by processes during a run, from /proc: where each request's cost goes.

On a machine whose cores the clients and servers share, throughput is bounded by the CPU each
request costs in total, so these figures explain what latency and throughput tables alone
cannot (for instance why batching, which saves only model time, barely moves throughput when
protocol handling dominates).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (which may hold spaces and parentheses): state,
    parent pid, ..., utime and stime are the 12th and 13th."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_seconds(pid: int) -> float:
    """CPU seconds so far of one process, every thread."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _TICK


def group_seconds(pgid: int) -> float:
    """CPU seconds so far of every live process in process group `pgid`."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) == pgid:
                total += process_seconds(int(entry.name))
        except (OSError, IndexError, ValueError):  # exited meanwhile
            continue
    return total


def own_seconds() -> float:
    """CPU seconds of this process, every thread (the load generator's clients)."""
    return time.process_time()


def descendants(pid: int) -> list[int]:
    """The live processes below `pid`, children before their own."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            children.setdefault(int(stat_fields(int(entry.name))[1]), []).append(int(entry.name))
        except (OSError, IndexError, ValueError):  # exited meanwhile
            continue
    found, pending = [], list(children.get(pid, ()))
    while pending:
        current = pending.pop(0)
        found.append(current)
        pending.extend(children.get(current, ()))
    return found


def tree_seconds(pid: int) -> float:
    """CPU seconds so far of `pid` and its live descendants: for a server whose workers leave
    its process group (Ray starts each actor in a session of its own)."""
    total = 0.0
    for current in (pid, *descendants(pid)):
        try:
            total += process_seconds(current)
        except (OSError, IndexError, ValueError):  # exited meanwhile
            continue
    return total
