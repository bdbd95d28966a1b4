"""A file a long-running process touches while it works (PLATFORM_LIVENESS_FILE), so a container
health check reads its age with the shell's `stat` instead of starting Django every 30 s: the
check compose ran before (`manage.py check`) cost each of five services over a CPU-second a
time and said nothing about the process it checked.

Celery workers touch it from their own timer (a bootstep), so a worker whose event loop stopped
goes stale; the scheduler touches it once a loop."""

import logging
from pathlib import Path
from typing import Any

from celery import bootsteps
from django.conf import settings

logger = logging.getLogger(__name__)

# Compose's health checks call the file stale at 90 s: three beats missed, never one late pass.
BEAT_SECONDS = 30.0


def liveness_beat() -> None:
    """Touch the file (made on first use); nothing when PLATFORM_LIVENESS_FILE is empty."""
    path = settings.PLATFORM.liveness_file
    if not path:
        return
    try:
        Path(path).touch()
    except OSError:
        # A health check that fails is the report; the process itself goes on.
        logger.warning("Could not touch the liveness file %s", path, exc_info=True)


class LivenessStep(bootsteps.StartStopStep):
    """Beats from the worker's timer, which only runs while its event loop does."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.entry: Any = None

    def start(self, parent: Any) -> None:
        if settings.PLATFORM.liveness_file:
            liveness_beat()
            self.entry = parent.timer.call_repeatedly(BEAT_SECONDS, liveness_beat)

    def stop(self, parent: Any) -> None:
        if self.entry is None:
            return
        self.entry.cancel()
        # A worker that stopped is not alive, whatever the file's age says.
        Path(settings.PLATFORM.liveness_file).unlink(missing_ok=True)
