"""The recorder turns a trial's events into rows: metrics, first step, replays after a resume."""

import sys
import time
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories import ExperimentFactory, TrialFactory
from tfplatform.experiments.models import Checkpoint, Experiment, Metric
from tfplatform.experiments.services.execution import trial_outcome_record
from tfplatform.experiments.services.recording import TrialEventRecorder
from training.spec import TrialEvent, TrialOutcome

pytestmark = pytest.mark.django_db


def metric(epoch: int, **extra: object) -> TrialEvent:
    return TrialEvent(
        kind="metric", payload={"epoch": epoch, "loss": 1.0 / epoch, **extra}, task="worker:0"
    )


def test_replayed_epochs_fill_only_the_gaps_a_lost_gang_left() -> None:
    experiment = ExperimentFactory()
    first = TrialFactory(experiment=experiment, restart_count=0)
    TrialEventRecorder(trial=first)([metric(1)])
    TrialEventRecorder(trial=first)([metric(2)])
    # The gang died after saving epoch 3's checkpoint but before reporting it.
    second = TrialFactory(experiment=experiment, restart_count=1)
    record = TrialEventRecorder(trial=second)
    record([metric(epoch, replayed=True) for epoch in (1, 2, 3)])
    record([metric(4)])
    rows = Metric.objects.filter(trial__experiment=experiment, name="loss").order_by("epoch")
    assert [(m.epoch, m.trial_id) for m in rows] == [
        (1, first.pk),
        (2, first.pk),
        (3, second.pk),
        (4, second.pk),
    ]
    assert not Metric.objects.filter(name="replayed").exists()


def test_an_epoch_trained_again_after_its_checkpoint_was_lost_replaces_the_lost_report() -> None:
    experiment = ExperimentFactory()
    first = TrialFactory(experiment=experiment, restart_count=0)
    record = TrialEventRecorder(trial=first)
    record([metric(epoch, images_per_sec=100.0) for epoch in (1, 2, 3)])
    # Throughput samples of the lost epoch: measured work, kept.
    record([TrialEvent(kind="throughput", task="worker:0",
                       payload={"epoch": 3, "images_per_sec": 90.0}) for _ in range(3)])
    # Epoch 3's save failed after its report (a full disk): the next trial resumes from 2.
    second = TrialFactory(experiment=experiment, restart_count=1)
    record = TrialEventRecorder(trial=second)
    record([metric(epoch, replayed=True) for epoch in (1, 2)])
    record([metric(epoch, images_per_sec=100.0) for epoch in (3, 4)])
    rows = Metric.objects.filter(trial__experiment=experiment, name="loss").order_by("epoch")
    assert [(m.epoch, m.trial_id) for m in rows] == [
        (1, first.pk), (2, first.pk), (3, second.pk), (4, second.pk)]
    throughput = Metric.objects.filter(trial=first, name="images_per_sec", epoch=3)
    assert throughput.count() == 4  # the epoch's own figure and the three samples
    # Another experiment's epoch 3 is not touched.
    other = TrialFactory()
    TrialEventRecorder(trial=other)([metric(3)])
    TrialEventRecorder(trial=TrialFactory(experiment=experiment, restart_count=2))([metric(3)])
    assert Metric.objects.filter(trial=other, name="loss").count() == 1


def test_first_step_time_is_kept_from_the_first_report() -> None:
    trial = TrialFactory()
    record = TrialEventRecorder(trial=trial)
    now = time.time()
    record([TrialEvent(kind="status", payload={"phase": "first_step"}, task="worker:0", time=now)])
    record(
        [TrialEvent(kind="status", payload={"phase": "first_step"}, task="worker:0", time=now + 5)]
    )
    trial.refresh_from_db()
    assert trial.first_step_at is not None
    assert trial.first_step_at.timestamp() == pytest.approx(now, abs=1e-3)


def test_an_epoch_is_recorded_as_one_row_per_number_sharing_its_time() -> None:
    trial = TrialFactory()
    record = TrialEventRecorder(trial=trial)
    now = time.time()
    record([TrialEvent(kind="metric", task="worker:0", time=now, payload={
        "epoch": 3, "loss": 0.5, "val_accuracy": 0.9, "images_per_sec": 4000.0, "note": "text",
    })])
    rows = {m.name: m for m in Metric.objects.filter(trial=trial)}
    assert {name: m.value for name, m in rows.items()} == {
        "loss": 0.5, "val_accuracy": 0.9, "images_per_sec": 4000.0,
    }
    assert {(m.epoch, m.step) for m in rows.values()} == {(3, 3)}
    assert len({m.recorded_at for m in rows.values()}) == 1
    assert rows["loss"].recorded_at.timestamp() == pytest.approx(now, abs=1e-3)


def test_throughput_keeps_the_chiefs_rates_only() -> None:
    trial = TrialFactory()
    record = TrialEventRecorder(trial=trial)
    payload = {"epoch": 2, "optimizer_step": 90, "images_per_sec": 3000.0,
               "images_per_sec_per_replica": 1500.0}
    record([TrialEvent(kind="throughput", task="worker:1", payload=payload),
            TrialEvent(kind="throughput", task="worker:0", payload=payload)])
    rows = Metric.objects.filter(trial=trial).order_by("name")
    assert [(m.name, m.value, m.step, m.epoch) for m in rows] == [
        ("images_per_sec", 3000.0, 1, 2),
        ("images_per_sec_per_replica", 1500.0, 1, 2),
    ]


def checkpoint(epoch: object) -> TrialEvent:
    return TrialEvent(kind="checkpoint", task="worker:0",
                      payload={"epoch": epoch, "path": f"/ckpt/epoch-{epoch}", "best": True})


def status(phase: str) -> TrialEvent:
    return TrialEvent(kind="status", payload={"phase": phase}, task="worker:0")


def test_a_batch_appends_its_log_lines_in_one_write_in_order() -> None:
    trial = TrialFactory(logs="")
    record = TrialEventRecorder(trial=trial)
    with CaptureQueriesContext(connection) as queries:
        record([status("strategy"), metric(1), checkpoint(1), status("training"),
                status("exporting")])
    log_writes = [q["sql"] for q in queries.captured_queries
                  if q["sql"].startswith("UPDATE") and '"logs"' in q["sql"]]
    assert len(log_writes) == 1
    trial.refresh_from_db()
    assert [line.split("] ", 1)[1] for line in trial.logs.splitlines()] == [
        "phase=strategy", "phase=training", "phase=exporting",
    ]
    assert Checkpoint.objects.filter(trial=trial, epoch=1, is_best=True).count() == 1


def test_a_batch_is_recorded_whole_or_not_at_all() -> None:
    trial = TrialFactory(logs="")
    record = TrialEventRecorder(trial=trial)
    with pytest.raises(ValueError):
        record([status("training"), metric(1), checkpoint("not a number")])
    assert not Metric.objects.filter(trial=trial).exists()
    trial.refresh_from_db()
    assert trial.logs == ""
    # The failed batch leaves nothing behind for the next one.
    record([status("exporting")])
    trial.refresh_from_db()
    assert trial.logs.endswith("phase=exporting\n") and "training" not in trial.logs


def test_the_runtime_comes_from_the_supervisor_and_the_tensorflow_version_from_a_task() -> None:
    trial = TrialFactory()
    record = TrialEventRecorder(trial=trial)
    record([
        # A task (user code can write its events) cannot claim it ran isolated.
        TrialEvent(kind="status", payload={"phase": "launching", "runtime": "sandbox"},
                   task="worker:0"),
        TrialEvent(kind="status", payload={"phase": "launching", "runtime": "process"},
                   task="supervisor"),
        TrialEvent(kind="status", payload={"phase": "strategy", "tensorflow_version": "2.21.0"},
                   task="worker:0"),
    ])
    trial.refresh_from_db()
    assert (trial.runtime, trial.tensorflow_version) == ("process", "2.21.0")


def test_the_platforms_lines_and_the_failure_reason_name_no_node_path(settings: Any) -> None:
    work = settings.PLATFORM.work_dir / "experiment-7"
    traceback = (f'File "{settings.ROOT_DIR}/training/trial/callbacks.py", line 151\n'
                 f'File "{sys.prefix}/lib/python3.11/site-packages/tf_keras/engine.py"\n'
                 f"{work}/checkpoints/epoch-3.index; No space left on device")
    trial = TrialFactory(experiment=ExperimentFactory(state="running"), state="running")
    TrialEventRecorder(trial=trial)([
        TrialEvent(kind="error", payload={"message": traceback}, task="worker:0"),
        TrialEvent(kind="result", payload={"export_path": f"{work}/export"}, task="worker:0"),
        # What the user's own code printed is theirs, paths and all.
        TrialEvent(kind="log", payload={"message": f"saved to {work}/mine.txt",
                                        "stream": "output"}, task="worker:0"),
    ])
    trial_outcome_record(trial=trial, outcome=TrialOutcome(
        status="failed", retryable=False, exit_reason=traceback, exit_codes={"worker:0": 74}))
    trial.refresh_from_db()
    trial.experiment.refresh_from_db()
    shown = (trial.logs.replace(f"saved to {work}/mine.txt", ""), trial.exit_reason,
             trial.experiment.error)
    for text in shown:
        assert str(settings.ROOT_DIR) not in text and sys.prefix not in text, text
    assert 'File "<platform>/training/trial/callbacks.py", line 151' in trial.exit_reason
    assert "<python>/lib/python3.11/site-packages/tf_keras/engine.py" in trial.exit_reason
    assert "<work>/experiment-7/checkpoints/epoch-3.index" in trial.experiment.error
    assert "'export_path': '<work>/experiment-7/export'" in trial.logs
    assert f"saved to {work}/mine.txt" in trial.logs


def test_what_the_cluster_keeps_a_started_trial_waiting_for_is_its_pending_reason() -> None:
    trial = TrialFactory(experiment=ExperimentFactory(state="running"))
    record = TrialEventRecorder(trial=trial)
    waiting = "Waiting for the Spark cluster: the gang's 2 tasks need 2 free task slots at once"
    record([TrialEvent(kind="status", task="supervisor", trial_id=str(trial.pk),
                       payload={"phase": "waiting", "reason": waiting})])
    assert Experiment.objects.get(pk=trial.experiment_id).pending_reason == waiting
    # A task cannot set it; the first step clears it.
    record([TrialEvent(kind="status", task="worker:0", trial_id=str(trial.pk),
                       payload={"phase": "waiting", "reason": "forged"})])
    assert Experiment.objects.get(pk=trial.experiment_id).pending_reason == waiting
    record([TrialEvent(kind="status", task="worker:0", trial_id=str(trial.pk),
                       payload={"phase": "first_step"})])
    assert Experiment.objects.get(pk=trial.experiment_id).pending_reason == ""
