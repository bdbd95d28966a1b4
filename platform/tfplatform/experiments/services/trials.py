"""Writes to trials: creation by the scheduler, progress from the supervising worker, ends."""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Count
from django.db.models.functions import Now
from django.utils import timezone

from tfplatform.cluster.elastic import RESIZED
from tfplatform.cluster.placement import PREEMPTED
from tfplatform.core.bulk import database_now, ids_match, rows_insert
from tfplatform.core.errors import InvalidTransition
from tfplatform.experiments.models import Checkpoint, Experiment, Metric, Trial

TRIAL_ACTIVE_STATES = (Trial.State.PENDING, Trial.State.RUNNING)
LOG_KEEP_CHARS = 200_000
STOP_CANCELED = "canceled"
STOP_ORPHANED = "orphaned"  # its supervisor is gone; survivors of its gang are told to stop
# Stops after which the experiment queues again and resumes from its checkpoint.
RESUMED_STOPS = (PREEMPTED, RESIZED)


def trial_create(*, experiment: Experiment) -> Trial:
    return Trial.objects.get(pk=trials_create(experiment_ids=[experiment.pk])[experiment.pk])


def trials_create(*, experiment_ids: list[int], borrowed: frozenset[int] = frozenset(),
                  sizes: Mapping[int, tuple[int, int]] | None = None) -> dict[int, int]:
    """A new trial for each experiment (a scheduling pass's admissions): one query counts their
    earlier trials, one insert makes them; those of `borrowed` start on borrowed devices, those
    in `sizes` (elastic) at that many workers and GPUs per worker.
    Returns experiment id → its new trial's id."""
    sizes = sizes or {}
    earlier = dict(
        Trial.objects.filter(experiment_id__in=experiment_ids).order_by()
        .values_list("experiment_id").annotate(n=Count("id"))
    )
    made = rows_insert(
        model=Trial, fields=("experiment", "restart_count", "borrowed", "workers",
                             "gpus_per_worker"),
        rows=[(pk, earlier.get(pk, 0), pk in borrowed, *sizes.get(pk, (None, None)))
              for pk in experiment_ids],
        returning=("experiment", "id"))
    return dict(made)


def trial_request_stop(*, trial: Trial, reason: str, detail: str = "") -> None:
    Trial.objects.filter(pk=trial.pk, state__in=TRIAL_ACTIVE_STATES, stop_reason="").update(
        stop_reason=reason, stop_detail=detail[:300]
    )


def trial_mark_dispatched(*, trial_id: int) -> None:
    trials_mark_dispatched(trial_ids=[trial_id])


def trials_mark_dispatched(*, trial_ids: list[int]) -> None:
    if not trial_ids:
        return
    # One statement text for any count (core.bulk.ids_match): a pass marks hundreds at once.
    match, params = ids_match(column="id", ids=trial_ids)
    now, now_params = database_now(model=Trial)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {connection.ops.quote_name(Trial._meta.db_table)}"  # noqa: S608
                       f" SET dispatched_at = {now} WHERE {match}", [*now_params, *params])


def trial_start(*, trial_id: int) -> Trial | None:
    """Mark a pending trial running; None when it was already taken (a redelivered message)."""
    with transaction.atomic():
        claimed = Trial.objects.filter(pk=trial_id, state=Trial.State.PENDING).update(
            state=Trial.State.RUNNING, started_at=Now()
        )
        if not claimed:
            return None
        return Trial.objects.select_related("experiment").get(pk=trial_id)


def trial_finish(
    *,
    trial: Trial,
    state: str,
    exit_reason: str = "",
    exit_code: int | None = None,
    retryable: bool = False,
) -> Trial | None:
    """Record how a trial ended; None when its end was already recorded (first word wins)."""
    if state not in (Trial.State.COMPLETED, Trial.State.FAILED, Trial.State.CANCELED):
        raise InvalidTransition(f"A trial cannot finish as {state}.")
    claimed = Trial.objects.filter(pk=trial.pk, state__in=TRIAL_ACTIVE_STATES).update(
        state=state,
        exit_reason=exit_reason,
        exit_code=exit_code,
        retryable=retryable,
        finished_at=Now(),
    )
    trial.refresh_from_db()
    return trial if claimed else None


def trial_append_log(*, trial: Trial, text: str) -> None:
    current = Trial.objects.values_list("logs", flat=True).get(pk=trial.pk)
    Trial.objects.filter(pk=trial.pk).update(logs=(current + text)[-LOG_KEEP_CHARS:])


def metrics_record(
    *,
    trial: Trial,
    values: Mapping[str, float],
    step: int = 0,
    epoch: int | None = None,
    recorded_at: datetime | None = None,
) -> list[Metric]:
    """One event's metrics (an epoch's ~10) as one insert: the worker records them while the
    trial trains on the same cores, and a commit per row cost it more than the rows."""
    when = recorded_at or timezone.now()
    rows = [
        Metric(trial=trial, name=name, value=float(value), step=step, epoch=epoch,
               recorded_at=when)
        for name, value in values.items()
    ]
    return Metric.objects.bulk_create(rows)  # one statement, in a transaction of its own


def metrics_supersede_epoch(*, trial: Trial, epoch: int, names: Sequence[str]) -> int:
    """An epoch trained again by `trial` replaces what an earlier trial of its experiment reported
    for it: that one reported the epoch, then lost it with its checkpoint (a write that failed
    after the report, a process killed before its save was whole). The experiment's curve shows
    the training its model came from, each epoch once. Throughput samples stay: they measured
    work that was done."""
    deleted, _ = (Metric.objects
                  .filter(trial__experiment_id=trial.experiment_id, epoch=epoch, step=epoch,
                          name__in=names)
                  .exclude(trial_id=trial.pk)
                  .delete())
    return deleted


def trial_set_placement(*, trial: Trial, placement: dict[str, Any]) -> None:
    Trial.objects.filter(pk=trial.pk).update(placement=placement)


def trial_set_runtime(*, trial: Trial, runtime: str = "", tensorflow_version: str = "") -> None:
    """What its supervisor (runtime) or its tasks (TensorFlow version) reported; blanks kept."""
    changes = {
        name: value[:40]
        for name, value in (("runtime", runtime), ("tensorflow_version", tensorflow_version))
        if value
    }
    if changes:
        Trial.objects.filter(pk=trial.pk).update(**changes)


def trial_set_first_step(*, trial: Trial, at: datetime) -> None:
    """When its first training step ended; the first report wins (a restart reports again)."""
    Trial.objects.filter(pk=trial.pk, first_step_at__isnull=True).update(first_step_at=at)


def checkpoint_record(
    *, trial: Trial, epoch: int, path: str, is_best: bool, metrics: dict[str, Any]
) -> Checkpoint:
    return Checkpoint.objects.create(
        experiment_id=trial.experiment_id,
        trial=trial,
        epoch=epoch,
        path=path[:500],
        is_best=is_best,
        metrics=metrics,
    )
