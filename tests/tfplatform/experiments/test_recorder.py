"""The recorder turns a trial's events into rows: metrics, first step, replays after a resume."""

import time

import pytest

from tests.factories import ExperimentFactory, TrialFactory
from tfplatform.experiments.models import Metric
from tfplatform.experiments.recorder import TrialEventRecorder
from training.spec import TrialEvent

pytestmark = pytest.mark.django_db


def metric(epoch: int, **extra: object) -> TrialEvent:
    return TrialEvent(
        kind="metric", payload={"epoch": epoch, "loss": 1.0 / epoch, **extra}, task="worker:0"
    )


def test_replayed_epochs_fill_only_the_gaps_a_lost_gang_left() -> None:
    experiment = ExperimentFactory()
    first = TrialFactory(experiment=experiment, restart_count=0)
    TrialEventRecorder(trial=first)(metric(1))
    TrialEventRecorder(trial=first)(metric(2))
    # The gang died after saving epoch 3's checkpoint but before reporting it.
    second = TrialFactory(experiment=experiment, restart_count=1)
    record = TrialEventRecorder(trial=second)
    for epoch in (1, 2, 3):
        record(metric(epoch, replayed=True))
    record(metric(4))
    rows = Metric.objects.filter(trial__experiment=experiment, name="loss").order_by("epoch")
    assert [(m.epoch, m.trial_id) for m in rows] == [
        (1, first.pk),
        (2, first.pk),
        (3, second.pk),
        (4, second.pk),
    ]
    assert not Metric.objects.filter(name="replayed").exists()


def test_first_step_time_is_kept_from_the_first_report() -> None:
    trial = TrialFactory()
    record = TrialEventRecorder(trial=trial)
    now = time.time()
    record(TrialEvent(kind="status", payload={"phase": "first_step"}, task="worker:0", time=now))
    record(
        TrialEvent(kind="status", payload={"phase": "first_step"}, task="worker:0", time=now + 5)
    )
    trial.refresh_from_db()
    assert trial.first_step_at is not None
    assert trial.first_step_at.timestamp() == pytest.approx(now, abs=1e-3)
