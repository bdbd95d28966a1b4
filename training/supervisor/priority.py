"""Warm hosts import TensorFlow at idle priority, and the task they become runs at normal priority.

A refill starts right after a trial ends, often while another trial of the node trains: at
SCHED_IDLE its import only takes CPU that no one else wants. The policy is per thread and is
inherited by every thread and process started from one, so the pool's spawner thread takes it
(`spawner_idle`) and every host it starts imports at it. When a host is taken, the node sets
every thread of its process tree back to SCHED_OTHER (`tree_normal`) before the task's order is
sent: the threads the task starts then inherit the normal policy. Leaving SCHED_IDLE takes
CAP_SYS_NICE, which only a node run as root has, and only such a node keeps warm sandboxes.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def spawner_idle() -> None:
    """The calling thread (and all it starts from now on) at SCHED_IDLE."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def _threads(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    return []


def tree_threads(*, pid: int) -> list[int]:
    """Every thread of `pid` and of all its descendants (that have not exited meanwhile)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        for tid in _threads(current):
            found.append(tid)
            with contextlib.suppress(OSError):
                children = Path(f"/proc/{current}/task/{tid}/children").read_text().split()
                pending += [int(child) for child in children]
    return found


def tree_normal(*, pid: int) -> None:
    """Every thread of the tree back to SCHED_OTHER. PermissionError without CAP_SYS_NICE."""
    for tid in tree_threads(pid=pid):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
