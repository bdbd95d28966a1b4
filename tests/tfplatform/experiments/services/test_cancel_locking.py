"""A cancel and a trial's end at the same moment: both finish, neither deadlocks.

A node recording a trial's end locks the trial, then the experiment (trial_outcome_record);
`experiment_cancel` took them the other way round, and PostgreSQL broke the cycle by failing
one of them (seen in a full run: the workspace browser test's cancel, "deadlock detected")."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections, transaction

from tests import live
from tests.factories import ExperimentFactory, TrialFactory
from tfplatform.core.errors import InvalidTransition
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services.submission import experiment_cancel

pytestmark = pytest.mark.django_db(transaction=True)


def waiting_on_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                       " AND wait_event_type = 'Lock'")
        return int(cursor.fetchone()[0])


def test_a_cancel_while_a_node_records_the_trials_end_waits_for_it_instead_of_deadlocking(
) -> None:
    experiment = ExperimentFactory(state=Experiment.State.RUNNING)
    trial = TrialFactory(experiment=experiment, state=Trial.State.RUNNING)
    trial_locked, go_on = threading.Event(), threading.Event()

    def node_records_the_end() -> None:
        # The locks trial_outcome_record takes, in its order, with the cancel let in between.
        try:
            with transaction.atomic():
                Trial.objects.filter(pk=trial.pk).update(state=Trial.State.COMPLETED)
                trial_locked.set()
                go_on.wait(timeout=30)
                Experiment.objects.select_for_update().get(pk=experiment.pk)
                Experiment.objects.filter(pk=experiment.pk).update(
                    state=Experiment.State.COMPLETED)
        finally:
            connections.close_all()

    def cancel() -> str:
        try:
            return experiment_cancel(experiment=experiment).state
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=2) as pool:
        node = pool.submit(node_records_the_end)
        assert trial_locked.wait(timeout=30)
        canceling = pool.submit(cancel)
        live.wait_for(lambda: waiting_on_locks() >= 1, timeout=30,
                      what="the cancel to wait for a lock")
        go_on.set()
        node.result(timeout=60)  # old order: one of the two is "deadlock detected"
        with pytest.raises(InvalidTransition, match="already completed"):
            canceling.result(timeout=60)
    experiment.refresh_from_db()
    trial.refresh_from_db()
    assert (experiment.state, trial.state, trial.stop_reason) == ("completed", "completed", "")
