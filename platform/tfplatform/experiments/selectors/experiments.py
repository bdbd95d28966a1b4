"""Reads of experiments: lists, one experiment, its metrics and logs, counts."""

from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.db.models import Count, F, Q, QuerySet, Sum, Window
from django.db.models.functions import RowNumber

from tfplatform.accounts.models import User
from tfplatform.accounts.visibility import visible_to
from tfplatform.cluster.models import Node
from tfplatform.core.errors import NotFound
from tfplatform.experiments.models import Experiment, Metric
from tfplatform.experiments.selectors.trials import experiment_trials

# A metrics answer holds about this many points per trial and metric, unless asked otherwise.
METRIC_POINTS_DEFAULT = 2_000


METRIC_POINTS_MAX = 20_000


LOG_TAIL_MAX = 100_000


# One logs answer at most (each trial keeps its own last LOG_KEEP_CHARS; restarts add up).
LOGS_MAX_CHARS = 2 * 2**20


def experiment_list(*, user: User | AnonymousUser) -> QuerySet[Experiment]:
    # Workspace sessions are listed as workspaces (workspace_list), not as experiments.
    experiments = Experiment.objects.filter(kind=Experiment.Kind.TRAINING)
    return visible_to(queryset=experiments, user=user).select_related("owner", "environment")


def experiment_get(*, user: User | AnonymousUser, experiment_id: int) -> Experiment:
    # Someone else's experiment is "not found", never "forbidden": ids reveal nothing.
    experiment = experiment_list(user=user).filter(pk=experiment_id).first()
    if experiment is None:
        raise NotFound("Experiment not found.")
    return experiment


def experiment_metrics(*, experiment: Experiment, name: str | None = None,
                       max_points: int | None = None) -> QuerySet[Metric]:
    """Its metrics in order; with `max_points`, each trial's series of each metric thinned to
    about that many evenly spaced points, its first and last always among them (a long run
    records a row per throughput interval: hundreds of thousands)."""
    metrics = Metric.objects.filter(trial__experiment=experiment).select_related("trial")
    if name:
        metrics = metrics.filter(name=name)
    if max_points is not None:
        series: dict[str, Any] = {"partition_by": [F("trial_id"), F("name")]}
        metrics = metrics.annotate(
            index=Window(RowNumber(), order_by=[F("recorded_at"), F("id")], **series) - 1,
            total=Window(Count("id"), **series),
        ).annotate(
            # Integer division: which of `max_points` equal buckets a point falls in.
            bucket=F("index") * max_points / F("total"),
            previous_bucket=(F("index") - 1) * max_points / F("total"),
        ).filter(  # each bucket's first point, and the series' last
            Q(index=0) | Q(index=F("total") - 1) | ~Q(bucket=F("previous_bucket"))
        )
    return metrics.order_by("recorded_at", "id")


def experiment_unisolated_nodes(*, experiment: Experiment) -> list[str]:
    """Hostnames of the nodes that ran a trial of `experiment` without isolation ("process")."""
    return list(
        Node.objects.filter(
            allocations__trial__experiment=experiment,
            trial_runtime=Node.TrialRuntime.PROCESS,
        )
        .order_by("hostname")
        .values_list("hostname", flat=True)
        .distinct()
    )


def experiment_logs(*, experiment: Experiment, tail_lines: int | None = None) -> str:
    parts = []
    for trial in experiment_trials(experiment=experiment):
        if trial.logs:
            parts.append(f"--- trial {trial.restart_count} ---\n{trial.logs}")
    text = "\n".join(parts)
    if tail_lines is not None:
        text = "\n".join(text.splitlines()[-tail_lines:])
    if len(text) > LOGS_MAX_CHARS:
        text = "[earlier output cut]\n" + text[-LOGS_MAX_CHARS:]
    return text


def experiment_state_counts(*, kind: str = Experiment.Kind.TRAINING) -> dict[str, int]:
    """How many experiments (or, with `kind`, workspace sessions) wait and run now (the
    cluster's utilization samples count experiments only)."""
    return Experiment.objects.filter(kind=kind).aggregate(
        queued=Count("pk", filter=Q(state=Experiment.State.QUEUED)),
        running=Count("pk", filter=Q(state=Experiment.State.RUNNING)),
    )


def upload_bytes_of(*, user: User) -> int:
    """What the user's experiment uploads (model modules, datasets) take on disk."""
    total = Experiment.objects.filter(owner=user).aggregate(n=Sum("upload_bytes"))["n"]
    return int(total or 0)
