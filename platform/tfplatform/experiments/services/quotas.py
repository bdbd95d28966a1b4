"""A scheduling pass's quota rules: what an experiment's owner and team may hold now, and who
borrows next.

A team's quotas (`gpu_quota`, `cpu_slot_quota`) are guaranteed; its limits (`gpu_limit`,
`cpu_slot_limit`, at least the quotas) are what it may hold by borrowing devices other teams
leave idle. An experiment that would take its team past a quota but not past a limit borrows:
the pass places it only after everything within its guarantee, on devices nobody else
wants, and never preempts for it. Borrowers share what is idle by their teams'
`over_quota_weight` (the team borrowing least per weight goes next), and their trials are the
first preempted when a team within its guarantee needs the devices (scheduling._plan_wait).
"""

import heapq
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from tfplatform.accounts.limits import NO_LIMIT, limits_resolve
from tfplatform.cluster.placement import (
    WHOLE_MILLI,
    ClusterView,
    QuotaKey,
    TaskNeed,
    gpus_text,
    needs_held,
    quota_key,
)
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.selectors.scheduling import QueuedExperiment


@dataclass(frozen=True)
class QuotaState:
    reason: str  # why it cannot start now whatever is free; "" when it may
    borrowing: bool  # it would start beyond its team's guarantee


def quota_state(*, experiment: QueuedExperiment, needs: list[TaskNeed], view: ClusterView,
                gpu_milli: int | None = None) -> QuotaState:
    """Its owner's quotas, limits and running limit against what they hold now. `gpu_milli`:
    the thousandths of GPUs it holds once placed (a share asked for as memory)."""
    has_team = experiment.team_id is not None
    limits = limits_resolve(
        team_gpu_quota=experiment.team_gpu_quota,
        team_cpu_slot_quota=experiment.team_cpu_slot_quota,
        team_max_running=experiment.team_user_max_running, has_team=has_team,
        team_gpu_limit=experiment.team_gpu_limit,
        team_cpu_slot_limit=experiment.team_cpu_slot_limit)
    key = quota_key(team_id=experiment.team_id, owner_id=experiment.owner_id)
    needed_milli, cpu_slots = needs_held(needs=needs)
    gpus = needed_milli if gpu_milli is None else gpu_milli
    borrowing = False
    for asked, quota, limit, held, unit, scale in (
            (gpus, limits.gpu_quota, limits.gpu_limit, view.quota_gpus, "GPUs", WHOLE_MILLI),
            (cpu_slots, limits.cpu_slot_quota, limits.cpu_slot_limit, view.quota_cpus,
             "CPU slots", 1)):
        in_use = held.get(key, 0)
        if not asked or in_use + asked <= quota * scale:
            continue
        if in_use + asked > limit * scale:
            return QuotaState(_over_text(has_team=has_team, quota=quota, limit=limit,
                                         unit=unit, in_use=in_use, asked=asked, scale=scale),
                              borrowing=False)
        borrowing = True
    limit = limits.max_running
    limited = experiment.kind == Experiment.Kind.TRAINING and not experiment.owner_is_staff
    if limited and limit != NO_LIMIT and view.running.get(experiment.owner_id, 0) >= limit:
        return QuotaState(f"Its owner has {limit} experiments running, their limit; it starts "
                          "when one of them ends.", borrowing=False)
    return QuotaState("", borrowing=borrowing)


def _over_text(*, has_team: bool, quota: int, limit: int, unit: str, in_use: int, asked: int,
               scale: int) -> str:
    def amount(value: int) -> str:
        return gpus_text(milli=value) if scale == WHOLE_MILLI else str(value)

    if not has_team:
        whose = f"Quota of a user without a team of {quota} {unit}"
    elif limit == quota:
        whose = f"Team quota of {quota} {unit}"
    else:
        whose = f"Team limit of {limit} {unit} (guaranteed {quota})"
    return f"{whose}: {amount(in_use)} in use, this needs {amount(asked)}."


def borrowing_text(*, experiment: QueuedExperiment, base: str) -> str:
    """Why a borrower waits: nothing idle fits it (it borrows, never preempts)."""
    return (f"Over its team's guarantee ({experiment.team_gpu_quota} GPUs, "
            f"{experiment.team_cpu_slot_quota} CPU slots): it borrows only devices other teams "
            f"leave idle, and none fits now. {base}")


def lending_order(*, borrowers: list[QueuedExperiment], view: ClusterView,
                  weights: dict[QuotaKey, int]) -> Iterator[QueuedExperiment]:
    """Borrowers one at a time: of the team that borrows least for its weight (GPUs, then CPU
    slots), in queue order within a team. What the caller starts between two is counted
    (view.borrowed) before the next is chosen."""
    teams: dict[QuotaKey, deque[QueuedExperiment]] = {}
    for experiment in borrowers:
        key = quota_key(team_id=experiment.team_id, owner_id=experiment.owner_id)
        teams.setdefault(key, deque()).append(experiment)

    def rank(key: QuotaKey) -> tuple[float, float]:
        gpus, cpus = view.borrowed.get(key, (0, 0))
        weight = max(1, weights.get(key, 1))
        return gpus / weight, cpus / weight

    heap = [(rank(key), order, key) for order, key in enumerate(teams)]
    heapq.heapify(heap)
    while heap:
        _, order, key = heapq.heappop(heap)
        yield teams[key].popleft()
        if teams[key]:
            heapq.heappush(heap, (rank(key), order, key))
