"""Durations, ticking timers and epoch progress bars, drawn the same way on every page."""

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

from tfplatform.experiments.models import Experiment

register = template.Library()
WAITING = (Experiment.State.QUEUED, Experiment.State.SCHEDULED)


@register.filter
def duration(seconds: float | None) -> str:
    """12s, 3m 05s, 2h 04m: what the client-side ticker (timers.js) writes too."""
    if seconds is None:
        return "—"
    total = max(int(seconds), 0)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@register.inclusion_tag("tags/timer.html")
def experiment_timer(experiment: Experiment) -> dict[str, Any]:
    """Queued for / running for, ticking in the browser; took, once finished."""
    now = timezone.now()
    if experiment.state in WAITING:
        since = experiment.created_at
        label = "queued" if experiment.state == Experiment.State.QUEUED else "starting"
    elif experiment.state == Experiment.State.RUNNING:
        since, label = experiment.started_at or experiment.created_at, "running"
    else:
        start = experiment.started_at or experiment.created_at
        end = experiment.finished_at or experiment.updated_at
        return {"label": "took", "seconds": (end - start).total_seconds(), "ticking": False}
    return {
        "label": label,
        "seconds": (now - since).total_seconds(),
        "ticking": True,
        "since": _millis(since),
        "now": _millis(now),
    }


@register.inclusion_tag("tags/progress.html")
def epoch_progress(done: int | None, planned: int | None) -> dict[str, Any]:
    done, planned = int(done or 0), int(planned or 0)
    percent = min(100, round(100 * done / planned)) if planned else 0
    return {"done": done, "planned": planned, "percent": percent}
