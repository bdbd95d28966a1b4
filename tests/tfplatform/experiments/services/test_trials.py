"""A trial's life as its worker node records it."""

from datetime import UTC, datetime

import pytest
from django.utils import timezone

from tests.factories import ExperimentFactory
from tfplatform.experiments.services.transitions import experiment_start, experiment_transition
from tfplatform.experiments.services.trials import trial_create, trial_finish, trial_start


@pytest.mark.django_db(transaction=True)
def test_a_trials_times_are_the_databases_whatever_the_nodes_clock_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    experiment = experiment_transition(experiment=ExperimentFactory(), to="scheduled")
    trial = trial_create(experiment=experiment)
    monkeypatch.setattr(timezone, "now", lambda: datetime(2001, 1, 1, tzinfo=UTC))
    started = trial_start(trial_id=trial.pk)
    assert started is not None
    experiment_start(experiment=experiment)
    trial_finish(trial=started, state="completed")
    monkeypatch.undo()
    started.refresh_from_db()
    experiment.refresh_from_db()
    assert experiment.created_at <= experiment.started_at <= timezone.now()
    assert started.started_at <= started.finished_at <= timezone.now()
    assert started.started_at.year == timezone.now().year
