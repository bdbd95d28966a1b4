"""One scheduling pass: place queued experiments on free devices, all of a gang or nothing.

Placement rule: each task of the TF cluster (worker i with k accelerators, or a parameter
server) needs either k free GPU devices on one node or, with k = 0, one CPU slot. Nodes are
chosen best-fit (the node whose free block is the smallest that still fits) so large blocks
stay whole for large jobs.
"""

import logging
from collections import defaultdict
from dataclasses import dataclass
from functools import partial

from django.db import connection, transaction
from django.utils import timezone

from tfplatform.cluster import selectors
from tfplatform.cluster.models import Allocation, Device, Node
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services import experiment_transition
from tfplatform.experiments.trials import trial_create

logger = logging.getLogger(__name__)
ADVISORY_LOCK_KEY = 7_305_001


@dataclass(frozen=True)
class TaskNeed:
    task_type: str
    task_index: int
    gpus: int


@dataclass(frozen=True)
class Placement:
    node_id: int
    device_ids: tuple[int, ...]
    need: TaskNeed


def experiment_task_needs(*, experiment: Experiment) -> list[TaskNeed]:
    needs = [TaskNeed("worker", i, experiment.gpus_per_worker) for i in range(experiment.workers)]
    needs += [TaskNeed("ps", i, 0) for i in range(experiment.parameter_servers)]
    return sorted(needs, key=lambda need: -need.gpus)


def gang_place(
    *, needs: list[TaskNeed], free: dict[int, dict[str, list[int]]]
) -> list[Placement] | None:
    """Place every task or none; `free` maps node id → device kind → free device ids."""
    remaining = {
        node: {kind: list(ids) for kind, ids in kinds.items()} for node, kinds in free.items()
    }
    placements = []
    for need in needs:
        kind, count = (Device.Kind.GPU, need.gpus) if need.gpus else (Device.Kind.CPU, 1)
        fitting = [node for node, kinds in remaining.items() if len(kinds.get(kind, [])) >= count]
        if not fitting:
            return None
        node = min(fitting, key=lambda n: (len(remaining[n][kind]), n))
        taken, remaining[node][kind] = remaining[node][kind][:count], remaining[node][kind][count:]
        placements.append(Placement(node_id=node, device_ids=tuple(taken), need=need))
    return placements


def pending_reason(*, needs: list[TaskNeed], free: dict[int, dict[str, list[int]]]) -> str:
    gpu_need = max((need.gpus for need in needs), default=0)
    if not free:
        return "No worker node is online and accepting work."
    if gpu_need:
        largest = max((len(kinds.get(Device.Kind.GPU, [])) for kinds in free.values()), default=0)
        return f"Needs {gpu_need} GPUs on one node; the largest free block is {largest}."
    return "Waiting for a free CPU slot on a worker node."


def _free_map() -> dict[int, dict[str, list[int]]]:
    free: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for device in selectors.devices_free().order_by("node_id", "kind", "index"):
        free[device.node_id][device.kind].append(device.pk)
    for node_id in selectors.nodes_schedulable().values_list("pk", flat=True):
        free[node_id]
    return free


def scheduler_pass() -> int:
    """Run one pass; returns how many experiments were scheduled."""
    from tfplatform.cluster.tasks import trial_dispatch

    scheduled: list[tuple[int, str]] = []
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # Two schedulers never interleave: the second waits for the first's transaction.
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ADVISORY_LOCK_KEY])
        free = _free_map()
        queued = Experiment.objects.filter(state=Experiment.State.QUEUED).select_related("team")
        team_gpus: dict[int, int] = {}
        position = 0
        for experiment in queued.order_by("-priority", "created_at", "id"):
            needs = experiment_task_needs(experiment=experiment)
            reason = _quota_block(experiment=experiment, team_gpus=team_gpus)
            placements = None if reason else gang_place(needs=needs, free=free)
            if placements is None:
                reason = reason or pending_reason(needs=needs, free=free)
                position += 1
                text = f"{reason} Queue position {position}."
                if experiment.pending_reason != text:
                    Experiment.objects.filter(pk=experiment.pk).update(pending_reason=text)
                continue
            trial = trial_create(experiment=experiment)
            for placement in placements:
                _allocate(trial_id=trial.pk, placement=placement)
                kinds = free[placement.node_id]
                for kind in kinds:
                    kinds[kind] = [d for d in kinds[kind] if d not in placement.device_ids]
            if experiment.team_id is not None:
                team_gpus[experiment.team_id] = (
                    team_gpus.get(experiment.team_id, 0) + experiment.gpus_requested
                )
            experiment_transition(
                experiment=experiment, to=Experiment.State.SCHEDULED, pending_reason=""
            )
            chief = next(
                p for p in placements if p.need.task_type == "worker" and p.need.task_index == 0
            )
            queue = Node.objects.values_list("queue", flat=True).get(pk=chief.node_id)
            scheduled.append((trial.pk, queue))
        for trial_id, queue in scheduled:
            transaction.on_commit(partial(trial_dispatch, trial_id=trial_id, queue=queue))
    return len(scheduled)


def _quota_block(*, experiment: Experiment, team_gpus: dict[int, int]) -> str:
    if experiment.team is None or experiment.gpus_requested == 0:
        return ""
    team_id = experiment.team.pk
    if team_id not in team_gpus:
        team_gpus[team_id] = selectors.gpus_in_use_by_team(team_id=team_id)
    in_use, quota = team_gpus[team_id], experiment.team.gpu_quota
    if in_use + experiment.gpus_requested > quota:
        return (
            f"Team quota of {quota} GPUs: {in_use} in use, this needs {experiment.gpus_requested}."
        )
    return ""


def _allocate(*, trial_id: int, placement: Placement) -> None:
    now = timezone.now()
    Allocation.objects.bulk_create(
        [
            Allocation(
                trial_id=trial_id,
                node_id=placement.node_id,
                device_id=device_id,
                task_type=placement.need.task_type,
                task_index=placement.need.task_index,
                created_at=now,
            )
            for device_id in placement.device_ids
        ]
    )


def allocations_release(*, trial_id: int) -> int:
    return Allocation.objects.filter(trial_id=trial_id, released_at__isnull=True).update(
        released_at=timezone.now()
    )
