"""An experiment's state machine: the only writes of an experiment's state and outcome."""

from functools import partial
from typing import Any

from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone

from tfplatform.core.bulk import ids_match
from tfplatform.core.errors import InvalidTransition
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.signals import experiment_finished
from tfplatform.notifications.events import EventKind
from tfplatform.notifications.services import event_publish

State = Experiment.State

ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    State.QUEUED: frozenset({State.SCHEDULED, State.CANCELED}),
    State.SCHEDULED: frozenset({State.RUNNING, State.QUEUED, State.FAILED, State.CANCELED}),
    State.RUNNING: frozenset({State.COMPLETED, State.FAILED, State.CANCELED, State.QUEUED}),
    State.COMPLETED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELED: frozenset(),
}
TERMINAL_STATES = frozenset({State.COMPLETED, State.FAILED, State.CANCELED})


def experiment_transition(
    *,
    experiment: Experiment,
    to: str,
    pending_reason: str | None = None,
    error: str | None = None,
    results: dict[str, Any] | None = None,
    strategy: str | None = None,
    strategy_reason: str | None = None,
) -> Experiment:
    """Move an experiment to state `to`, refusing moves the state machine does not allow.

    Only what a transition may record can be passed (None leaves a field as it is): a
    misspelt field is a TypeError, never a change silently dropped.
    """
    with transaction.atomic():
        current = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if to not in ALLOWED_TRANSITIONS[current.state]:
            raise InvalidTransition(f"An experiment that is {current.state} cannot become {to}.")
        # The database's clock, like heartbeats: the web app, the scheduler and every worker
        # node move experiments, and their clocks may disagree.
        now = Now()
        current.state = to
        if to == State.RUNNING and current.started_at is None:
            current.started_at = now
        if to in TERMINAL_STATES:
            current.finished_at = now
            current.pending_reason = ""
            transaction.on_commit(partial(_finished_send, experiment_id=current.pk))
        recorded = {
            "pending_reason": pending_reason,
            "error": error,
            "results": results,
            "strategy": strategy,
            "strategy_reason": strategy_reason,
        }
        for name, value in recorded.items():
            if value is not None:
                setattr(current, name, value)
        current.save()
        if to in (State.COMPLETED, State.FAILED) and current.kind == Experiment.Kind.TRAINING:
            event_publish(
                kind=EventKind.EXPERIMENT_COMPLETED if to == State.COMPLETED
                else EventKind.EXPERIMENT_FAILED, owner_id=current.owner_id,
                team_id=current.team_id, payload={
                    "id": current.pk, "name": current.name, "state": to, "model": current.model,
                    "dataset": current.dataset, "results": current.results,
                    "error": current.error[-1000:]})
    experiment.refresh_from_db()
    return experiment


def _finished_send(*, experiment_id: int) -> None:
    experiment_finished.send(sender=Experiment, experiment_id=experiment_id)


def experiment_continue(*, experiment: Experiment, epochs: int, reason: str) -> Experiment:
    """A completed experiment trains on to `epochs` epochs: queued again, its next trial resumes
    from its last checkpoint (a search's promoted trial). Only this path reopens a completed
    experiment; nothing reopens a failed or canceled one."""
    with transaction.atomic():
        current = Experiment.objects.select_for_update().get(pk=experiment.pk)
        done = int(current.hyperparameters.get("epochs", 0))
        if current.state != State.COMPLETED:
            raise InvalidTransition(
                f"Only a completed experiment can train on; this one is {current.state}.")
        if epochs <= done:
            raise InvalidTransition(f"It has already trained {done} epochs.")
        current.hyperparameters = {**current.hyperparameters, "epochs": epochs}
        current.state = State.QUEUED
        current.finished_at = None
        current.pending_reason = reason[:300]
        current.save()
    experiment.refresh_from_db()
    return experiment


def experiment_start(*, experiment: Experiment) -> None:
    """Scheduled → running, once: every part of a multi-node gang calls this as it starts."""
    with transaction.atomic():
        current = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if current.state == State.SCHEDULED:
            experiment_transition(experiment=current, to=State.RUNNING)


def experiment_set_pending_reason(
    *, experiment: Experiment, reason: str, replacing: str | None = None
) -> None:
    """Why a placed experiment has not started training yet (its node is building its
    environment); `replacing` clears or changes a reason only while it is still that one.

    A queued experiment's reason is the scheduler's own (services.scheduling), so it is left
    alone.
    """
    waiting = Experiment.objects.filter(
        pk=experiment.pk, state__in=[State.SCHEDULED, State.RUNNING]
    )
    if replacing is not None:
        waiting = waiting.filter(pending_reason=replacing)
    waiting.update(pending_reason=reason[:300], updated_at=timezone.now())


def experiment_set_strategy(*, experiment_id: int, strategy: str, reason: str) -> None:
    """The strategy the trial's chief chose, as soon as it says so (the outcome repeats it)."""
    Experiment.objects.filter(pk=experiment_id).update(
        strategy=strategy[:60], strategy_reason=reason[:300]
    )


# Ids per statement: well within SQLite's 32,766 parameters and PostgreSQL's 65,535.
IDS_PER_STATEMENT = 5_000


def experiments_schedule(*, experiment_ids: list[int]) -> set[int]:
    """QUEUED → SCHEDULED for every experiment of a scheduling pass at once: one conditional
    UPDATE … RETURNING per batch. An experiment that left the queue meanwhile (canceled) is
    not in the answer; nothing of it changes."""
    assert State.SCHEDULED in ALLOWED_TRANSITIONS[State.QUEUED]
    table = connection.ops.quote_name(Experiment._meta.db_table)
    admitted: set[int] = set()
    with connection.cursor() as cursor:
        for start in range(0, len(experiment_ids), IDS_PER_STATEMENT):
            match, ids = ids_match(column="id",
                                   ids=experiment_ids[start : start + IDS_PER_STATEMENT])
            cursor.execute(
                f"UPDATE {table} SET state = %s, pending_reason = '', updated_at = %s"  # noqa: S608
                f" WHERE {match} AND state = %s RETURNING id",
                [State.SCHEDULED.value, timezone.now(), *ids, State.QUEUED.value],
            )
            admitted.update(row[0] for row in cursor.fetchall())
    return admitted
