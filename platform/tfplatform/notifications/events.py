"""The events users may subscribe to, and the sentence each is told in (an email's subject, a
webhook's `summary`), made from the plain values its publisher gave."""

from typing import Any

from django.db import models

SUMMARY_LENGTH = 200


class EventKind(models.TextChoices):
    EXPERIMENT_COMPLETED = "experiment.completed", "An experiment completed"
    EXPERIMENT_FAILED = "experiment.failed", "An experiment failed"
    SEARCH_ENDED = "search.ended", "A search ended"
    WORKSPACE_CULLED = "workspace.culled", "A workspace was stopped as idle or too old"
    DEPLOY_AVAILABLE = "deploy.available", "A model version became available to serve"
    DEPLOY_FAILED = "deploy.failed", "A model version failed to load"


SUMMARIES: dict[str, str] = {
    EventKind.EXPERIMENT_COMPLETED: "Experiment {name} (#{id}) completed",
    EventKind.EXPERIMENT_FAILED: "Experiment {name} (#{id}) failed",
    EventKind.SEARCH_ENDED: "Search {name} (#{id}) ended: {state}",
    EventKind.WORKSPACE_CULLED: "Workspace {name} (#{id}) was stopped: {reason}",
    EventKind.DEPLOY_AVAILABLE: "Model {model} version {version} is available",
    EventKind.DEPLOY_FAILED: "Model {model} version {version} failed to load",
}


class _Shown(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


def event_summary(*, kind: str, payload: dict[str, Any]) -> str:
    """One line: names are users' text, and an email's subject must hold no line break."""
    line = SUMMARIES.get(kind, kind).format_map(_Shown(payload))
    return " ".join(line.split())[:SUMMARY_LENGTH]
