"""Reads of the queue: its order, an experiment's place in it, what it holds."""

from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet
from django.utils import timezone

from tfplatform.cluster.models import Allocation
from tfplatform.experiments.models import Experiment

# The queue's order, for the scheduler, the queue position and the pages alike: priority, then
# age (ties broken by id).
QUEUE_ORDER = ("-priority", "created_at", "id")


def experiments_queued() -> QuerySet[Experiment]:
    """The queue, in the order the scheduler considers it (QUEUE_ORDER)."""
    return Experiment.objects.filter(state=Experiment.State.QUEUED).order_by(*QUEUE_ORDER)


@dataclass(slots=True)
class QueuedExperiment:
    """What a scheduling pass reads of a queued experiment: plain values, not a model instance
    (a thousand of those cost the pass as much as its decisions). `pending_reason` is the
    reason stored; the pass sets the new one here."""

    pk: int
    owner_id: int
    team_id: int | None
    team_gpu_quota: int | None
    priority: int
    workers: int
    gpus_per_worker: int
    parameter_servers: int
    cpu_slots_per_worker: int
    pending_reason: str
    kind: str
    owner_is_staff: bool
    team_cpu_slot_quota: int | None
    team_user_max_running: int | None
    pool: str
    gpu_type: str
    gpu_milli: int
    gpu_memory_mb: int
    team_gpu_limit: int | None
    team_cpu_slot_limit: int | None
    team_weight: int | None
    workers_min: int = 0
    gpus_per_worker_min: int = 0

    @property
    def gpus_requested(self) -> int:
        return self.workers * self.gpus_per_worker


def experiments_queued_for_pass() -> list[QueuedExperiment]:
    """The queue in QUEUE_ORDER, as a scheduling pass needs it."""
    return _for_pass(experiments=experiments_queued())


def experiments_for_pass(*, experiment_ids: list[int]) -> list[QueuedExperiment]:
    """Running experiments as a pass reads queued ones (an elastic one it may grow)."""
    return _for_pass(experiments=Experiment.objects.filter(pk__in=experiment_ids).order_by("pk"))


def _for_pass(*, experiments: QuerySet[Experiment]) -> list[QueuedExperiment]:
    rows = experiments.values_list(
        "pk", "owner_id", "team_id", "team__gpu_quota", "priority", "workers",
        "gpus_per_worker", "parameter_servers", "cpu_slots_per_worker", "pending_reason",
        "kind", "owner__is_staff", "team__cpu_slot_quota", "team__user_max_running", "pool",
        "gpu_type", "gpu_milli", "gpu_memory_mb", "team__gpu_limit", "team__cpu_slot_limit",
        "team__over_quota_weight", "workers_min", "gpus_per_worker_min")
    return [QueuedExperiment(*row) for row in rows]


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


def experiments_queue_positions(*, experiment_ids: list[int]) -> dict[int, int]:
    """Queue positions of those of `experiment_ids` that are queued, in one statement: the
    scheduler stores no positions (each pass would rewrite every queued row), so a page of
    experiments reads them here. One pass over the queue, whatever the page's size."""
    if not experiment_ids:
        return {}
    table = connection.ops.quote_name(Experiment._meta.db_table)
    order = ", ".join(f"{t.lstrip('-')}{' DESC' if t.startswith('-') else ''}"
                      for t in QUEUE_ORDER)
    marks = ", ".join(["%s"] * len(experiment_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, position FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY {order})"  # noqa: S608
            f" AS position FROM {table} WHERE state = %s) AS queue WHERE id IN ({marks})",
            [Experiment.State.QUEUED.value, *experiment_ids],
        )
        return {pk: int(position) for pk, position in cursor.fetchall()}


def pending_reason_shown(*, experiment: Experiment, position: int | None) -> str:
    """Why it waits, as users read it: the scheduler's reason and, while queued, its place."""
    reason = experiment.pending_reason
    if position is None or experiment.state != Experiment.State.QUEUED:
        return reason
    return f"{reason} Queue position {position}." if reason else f"Queue position {position}."


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
