"""SIGTERM handling that is safe to install before TensorFlow loads.

The handler only records the request; training checks it at step boundaries (see callbacks.py) and
start-up checks it between phases, so a stop never lands in the middle of a checkpoint write or a
collective operation.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Any

# The supervisor's pid, handed to each task: comparing with it (not with the parent pid seen at
# start-up) also catches a supervisor that died while the task was still starting.
SUPERVISOR_PID_ENV = "PLATFORM_SUPERVISOR_PID"


class Preempted(Exception):
    """SIGTERM arrived: stop now; the last completed epoch is safely checkpointed."""


@dataclass
class StopFlag:
    requested_at: float | None = None
    signals: list[int] = field(default_factory=list)
    # Raise from the handler itself, for loops that have no safe point to check the flag at.
    immediate: bool = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        del frame
        self.signals.append(signum)
        self.requested_at = self.requested_at or time.time()
        if self.immediate:
            self.check()

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def check(self) -> None:
        if self.requested:
            raise Preempted(f"stopped by signal {signal.Signals(self.signals[0]).name}")


def orphan_watch(*, interval_seconds: float = 1.0, grace_seconds: float = 30.0) -> None:
    """SIGTERM ourselves when the supervisor dies (we get re-parented), so no task outlives it.

    Trial tasks run in their own session so a stop reaches the whole task; that also means a
    SIGKILLed supervisor would leave them running, holding devices nobody accounts for.
    """
    import os
    import threading

    parent = int(os.environ.get(SUPERVISOR_PID_ENV) or os.getppid())

    def watch() -> None:
        while True:
            time.sleep(interval_seconds)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGTERM)
                # A task stuck in a collective with a dead peer never reaches a safe point.
                time.sleep(grace_seconds)
                os.kill(os.getpid(), signal.SIGKILL)
                return

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()
