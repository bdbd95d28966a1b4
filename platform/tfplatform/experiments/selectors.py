from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from statistics import median
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.db.models import Count, F, Max, Prefetch, Q, QuerySet, Sum, Window
from django.db.models.functions import Now, RowNumber
from django.utils import timezone

from tfplatform.accounts.models import User
from tfplatform.accounts.visibility import visible_to
from tfplatform.cluster.models import Allocation, Node
from tfplatform.core.errors import NotFound
from tfplatform.experiments.models import (
    Environment,
    EnvironmentBuild,
    Experiment,
    Metric,
    Trial,
    Workspace,
)

# A metrics answer holds about this many points per trial and metric, unless asked otherwise.
METRIC_POINTS_DEFAULT = 2_000
METRIC_POINTS_MAX = 20_000
LOG_TAIL_MAX = 100_000
# One logs answer at most (each trial keeps its own last LOG_KEEP_CHARS; restarts add up).
LOGS_MAX_CHARS = 2 * 2**20


# The queue's order, for the scheduler, the queue position and the pages alike: priority, then
# age (ties broken by id).
QUEUE_ORDER = ("-priority", "created_at", "id")


def experiment_list(*, user: User | AnonymousUser) -> QuerySet[Experiment]:
    # Workspace sessions are listed as workspaces (workspace_list), not as experiments.
    experiments = Experiment.objects.filter(kind=Experiment.Kind.TRAINING)
    return visible_to(queryset=experiments, user=user).select_related("owner", "environment")


def workspace_list(*, user: User | AnonymousUser) -> QuerySet[Workspace]:
    """Only the owner's: a workspace holds their home volume and their API token."""
    if not user.is_authenticated:
        return Workspace.objects.none()
    return Workspace.objects.filter(owner=user).select_related(
        "owner", "environment", "experiment")


def workspace_get(*, user: User | AnonymousUser, workspace_id: int) -> Workspace:
    workspace = workspace_list(user=user).filter(pk=workspace_id).first()
    if workspace is None:
        raise NotFound("Workspace not found.")
    return workspace


WORKSPACE_STATES: dict[str, str] = {
    Experiment.State.QUEUED: "queued", Experiment.State.SCHEDULED: "starting",
    Experiment.State.RUNNING: "running", Experiment.State.COMPLETED: "stopped",
    Experiment.State.CANCELED: "stopped", Experiment.State.FAILED: "failed",
}


def workspace_state(*, workspace: Workspace) -> str:
    session = workspace.experiment
    if session is None:
        return "stopped"
    if session.state == Experiment.State.RUNNING and session.trials.filter(
            stop_reason__gt="", state__in=("pending", "running")).exists():
        return "stopping"
    if session.state == Experiment.State.RUNNING and workspace.ready_at is None:
        return "starting"  # its Jupyter has not answered yet
    return WORKSPACE_STATES.get(session.state, session.state)


def workspace_lab_url(*, workspace: Workspace) -> str:
    """Where its JupyterLab is reached: the `lab` process' origin when it has one of its own
    (`make run`: PORT+100), else a path on the platform's own origin (compose's TLS proxy)."""
    return f"{settings.PLATFORM.workspace_lab_origin}/workspaces/{workspace.pk}/lab/"


def workspace_devices(*, workspace: Workspace) -> list[str]:
    """The devices its session holds now, e.g. ["node-1/gpu:0"]."""
    session = workspace.experiment
    if session is None:
        return []
    held = Allocation.objects.filter(trial__experiment=session, released_at__isnull=True)
    return [str(a.device or a.node) for a in held.select_related("device__node", "node")]


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


def experiment_trials(*, experiment: Experiment) -> QuerySet[Trial]:
    return experiment.trials.order_by("restart_count")


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


def environment_list() -> QuerySet[Environment]:
    """Each with `experiment_count` (an environment in use cannot be deleted) and its builds."""
    builds = EnvironmentBuild.objects.select_related("node").order_by("node__hostname", "-pk")
    # Meta.ordering is dropped from GROUP BY queries, so the annotated list orders itself.
    return (
        Environment.objects.annotate(experiment_count=Count("experiments"))
        .prefetch_related(Prefetch("builds", queryset=builds))
        .order_by("name")
    )


def environment_get(*, environment_id: int) -> Environment:
    environment = environment_list().filter(pk=environment_id).first()
    if environment is None:
        raise NotFound("Environment not found.")
    return environment


def environment_build_get(*, build_id: int) -> EnvironmentBuild:
    build = EnvironmentBuild.objects.select_related("environment", "node").filter(pk=build_id)
    if (found := build.first()) is None:
        raise NotFound("Environment build not found.")
    return found


def environment_default(*, gpu: bool) -> Environment | None:
    environments = Environment.objects.order_by("id")
    return (environments.filter(gpu_capable=True) if gpu else environments).first()


# Emitted once per finished epoch next to the epoch's other metrics (same trial, same time):
# it tells an epoch's images/sec apart from the sampler's, which share the name.
EPOCH_MARK = "epoch_seconds"
EPOCH_CHART_METRICS = ("loss", "val_loss", "accuracy", "val_accuracy")
THROUGHPUT = "images_per_sec"
CHART_BATCH = 2000
ACTIVE_STATES = (Experiment.State.QUEUED, Experiment.State.SCHEDULED, Experiment.State.RUNNING)


def experiment_list_with_progress(*, user: User | AnonymousUser) -> QuerySet[Experiment]:
    """The visible experiments, each with `epochs_done`: the last epoch it finished."""
    return experiment_list(user=user).annotate(
        epochs_done=Max("trials__metrics__epoch", filter=Q(trials__metrics__name=EPOCH_MARK))
    )


def experiment_epochs_done(*, experiment: Experiment) -> int:
    done = Metric.objects.filter(trial__experiment=experiment, name=EPOCH_MARK).aggregate(
        done=Max("epoch")
    )["done"]
    return int(done or 0)


def experiments_queued() -> QuerySet[Experiment]:
    """The queue, in the order the scheduler considers it (QUEUE_ORDER)."""
    return Experiment.objects.filter(state=Experiment.State.QUEUED).order_by(*QUEUE_ORDER)


def _ahead_of(*, values: dict[str, Any]) -> Q:
    """Experiments QUEUE_ORDER puts before one with these values: ahead on the first field
    that differs, every field before it equal."""
    ahead = Q(pk__in=[])
    equal = Q()
    for term in QUEUE_ORDER:
        field = term.lstrip("-")
        before = Q(**{f"{field}__{'gt' if term.startswith('-') else 'lt'}": values[field]})
        ahead |= equal & before
        equal &= Q(**{field: values[field]})
    return ahead


def experiment_queue_position(*, experiment: Experiment) -> int | None:
    """1 for the experiment the scheduler looks at next; None if not queued."""
    if experiment.state != Experiment.State.QUEUED:
        return None
    values = {"priority": experiment.priority, "created_at": experiment.created_at,
              "id": experiment.pk}
    return experiments_queued().filter(_ahead_of(values=values)).count() + 1


def experiments_queued_ahead(*, priority: int) -> int:
    """How many queued experiments a new one submitted now at `priority` would wait behind."""
    newest = {"priority": priority, "created_at": timezone.now(), "id": 2**62}
    return experiments_queued().filter(_ahead_of(values=newest)).count()


def experiment_devices_held(*, experiment: Experiment) -> list[Allocation]:
    return list(
        Allocation.objects.filter(trial__experiment=experiment, released_at__isnull=True)
        .select_related("node", "device")
        .order_by("task_type", "task_index", "device__kind", "device__index")
    )


@dataclass
class ChartPoints:
    """Metric points recorded after `cursor`, as chart series of (x, y) pairs.

    Epoch metrics are drawn against the epoch; images/sec against seconds since the experiment
    started, both the sampler's readings during epochs and each finished epoch's average.
    """

    cursor: int
    more: bool
    epochs: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    images_per_sec: list[tuple[float, float]] = field(default_factory=list)
    images_per_sec_epoch: list[tuple[float, float]] = field(default_factory=list)


def experiment_chart_points(*, experiment: Experiment, after: int = 0) -> ChartPoints:
    wanted = (*EPOCH_CHART_METRICS, THROUGHPUT)
    rows = list(
        Metric.objects.filter(trial__experiment=experiment, name__in=wanted, pk__gt=after)
        .order_by("pk")
        .values_list("pk", "trial_id", "name", "epoch", "value", "recorded_at")[: CHART_BATCH + 1]
    )
    more = len(rows) > CHART_BATCH
    rows = rows[:CHART_BATCH]
    points = ChartPoints(cursor=rows[-1][0] if rows else after, more=more)
    if not rows:
        return points
    marks = _epoch_marks(experiment=experiment)
    start = experiment.started_at or min(row[5] for row in rows)
    for _, trial, name, epoch, value, recorded_at in rows:
        if name != THROUGHPUT:
            if epoch is not None:
                points.epochs.setdefault(name, []).append((epoch, value))
            continue
        seconds = round(max((recorded_at - start).total_seconds(), 0.0), 1)
        series = (
            points.images_per_sec_epoch if (trial, recorded_at) in marks else points.images_per_sec
        )
        series.append((seconds, value))
    return points


def _epoch_marks(*, experiment: Experiment) -> set[tuple[int, datetime]]:
    marks = Metric.objects.filter(trial__experiment=experiment, name=EPOCH_MARK)
    return set(marks.values_list("trial_id", "recorded_at"))


@dataclass(frozen=True)
class ComparisonRow:
    experiment: Experiment
    configuration: str
    batch_size: int | None  # per replica, as submitted
    global_batch_size: int | None  # as the strategy ran it
    images_per_sec: float | None  # median over finished epochs
    time_to_target_seconds: float | None
    accuracy: float | None
    val_accuracy: float | None
    duration_seconds: float | None
    speedup: float | None = None  # images/sec over the first row's


@dataclass(frozen=True)
class Comparison:
    rows: list[ComparisonRow]
    missing: list[int]  # asked for but not visible: unknown and someone else's look alike


def configuration_label(*, workers: int, gpus_per_worker: int, parameter_servers: int) -> str:
    """The benchmark-table name of a resource shape: CPU, 1 GPU, 4 GPUs, 2 workers × 2 GPUs..."""
    gpus = f"{gpus_per_worker} GPU{'s' if gpus_per_worker != 1 else ''}"
    if workers == 1 and not parameter_servers:
        return "CPU" if not gpus_per_worker else gpus if gpus_per_worker == 1 else f"{gpus}, 1 node"
    label = f"{workers} worker{'s' if workers != 1 else ''}"
    label += f" × {gpus}" if gpus_per_worker else " (CPU)"
    if parameter_servers:
        label += f" + {parameter_servers} PS"
    return label


def experiments_compare(*, user: User | AnonymousUser, ids: list[int]) -> Comparison:
    found = {e.pk: e for e in experiment_list(user=user).filter(pk__in=ids)}
    metrics = _last_epoch_metrics(experiment_ids=list(found))
    rates = _epoch_rates(experiment_ids=list(found))
    now = timezone.now()
    rows = []
    for pk in ids:
        experiment = found.get(pk)
        if experiment is None:
            continue
        last = metrics.get(pk, {})
        results = experiment.results or {}
        end = experiment.finished_at or (now if experiment.state in ACTIVE_STATES else None)
        batch = experiment.hyperparameters.get("batch_size")
        rows.append(
            ComparisonRow(
                experiment=experiment,
                configuration=configuration_label(
                    workers=experiment.workers,
                    gpus_per_worker=experiment.gpus_per_worker,
                    parameter_servers=experiment.parameter_servers,
                ),
                batch_size=int(batch) if isinstance(batch, int | float) else None,
                global_batch_size=results.get("global_batch_size") or None,
                images_per_sec=median(rates[pk]) if rates.get(pk) else None,
                time_to_target_seconds=last.get(
                    "time_to_target_seconds", results.get("time_to_target_seconds")
                ),
                accuracy=last.get("accuracy"),
                val_accuracy=last.get("val_accuracy"),
                duration_seconds=(end - experiment.started_at).total_seconds()
                if experiment.started_at and end
                else None,
            )
        )
    base = next((row.images_per_sec for row in rows if row.images_per_sec), None)
    rows = [
        replace(row, speedup=row.images_per_sec / base if base and row.images_per_sec else None)
        for row in rows
    ]
    return Comparison(rows=rows, missing=[pk for pk in ids if pk not in found])


def _last_epoch_metrics(*, experiment_ids: list[int]) -> dict[int, dict[str, float]]:
    """Per experiment, each epoch metric's value at the last epoch that reported it."""
    names = ("accuracy", "val_accuracy", "time_to_target_seconds")
    rows = (
        Metric.objects.filter(trial__experiment_id__in=experiment_ids, name__in=names)
        .order_by("epoch", "recorded_at", "pk")
        .values_list("trial__experiment_id", "name", "value")
    )
    last: dict[int, dict[str, float]] = {}
    for experiment, name, value in rows:
        values = last.setdefault(experiment, {})
        if name == "time_to_target_seconds":
            values.setdefault(name, value)  # the first time it was reached
        else:
            values[name] = value
    return last


def _epoch_rates(*, experiment_ids: list[int]) -> dict[int, list[float]]:
    """Per experiment, the images/sec of each finished epoch (the sampler's readings excluded)."""
    metrics = Metric.objects.filter(
        trial__experiment_id__in=experiment_ids, name__in=(THROUGHPUT, EPOCH_MARK)
    ).values_list("trial__experiment_id", "trial_id", "name", "recorded_at", "value")
    marks, rates = set(), []
    for experiment, trial, name, recorded_at, value in metrics:
        if name == EPOCH_MARK:
            marks.add((trial, recorded_at))
        else:
            rates.append((experiment, trial, recorded_at, value))
    per_experiment: dict[int, list[float]] = {}
    for experiment, trial, recorded_at, value in rates:
        if (trial, recorded_at) in marks:
            per_experiment.setdefault(experiment, []).append(value)
    return per_experiment


def experiment_state_counts() -> dict[str, int]:
    """How many experiments wait and run now (the cluster's utilization samples)."""
    return Experiment.objects.aggregate(
        queued=Count("pk", filter=Q(state=Experiment.State.QUEUED)),
        running=Count("pk", filter=Q(state=Experiment.State.RUNNING)),
    )


def upload_bytes_of(*, user: User) -> int:
    """What the user's experiment uploads (model modules, datasets) take on disk."""
    total = Experiment.objects.filter(owner=user).aggregate(n=Sum("upload_bytes"))["n"]
    return int(total or 0)


def trials_dispatch_overdue_ids() -> list[int]:
    """Live trials with a part no node has taken up: never dispatched and older than a few
    seconds (the pass that made it may still be sending), or last dispatched longer ago than
    PLATFORM_DISPATCH_RETRY_SECONDS."""
    waiting = Allocation.objects.filter(started_at__isnull=True, released_at__isnull=True)
    never = Q(dispatched_at__isnull=True, created_at__lt=Now() - timedelta(seconds=5))
    stale = Q(dispatched_at__lt=Now() - timedelta(
        seconds=settings.PLATFORM.dispatch_retry_seconds))
    return list(
        Trial.objects.filter(never | stale, state__in=(Trial.State.PENDING, Trial.State.RUNNING),
                             pk__in=waiting.values("trial_id"))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
