"""Crash recovery and cancellation with real processes and real signals."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from training.spec import Resources, TrialEvent

pytestmark = pytest.mark.slow

# Small batches make an epoch last about a second, so a kill lands mid-epoch.
SLOW_EPOCHS = {"epochs": 5, "batch_size": 4, "learning_rate": 0.005}


def test_killed_trial_resumes_at_the_next_epoch(
    tmp_path: Path,
    digits_module: str,
    run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> None:
    spec = make_spec(work_dir=tmp_path / "trial", model=digits_module, hyperparameters=SLOW_EPOCHS)
    pids: dict[str, int] = {}

    def kill_after_second_epoch(event: TrialEvent) -> None:
        if event.payload.get("phase") == "launched":
            pids.update({task["task"]: task["host"] for task in event.payload["tasks"]})
        # The checkpoint event, not the metric: writes are asynchronous, so an epoch is reported
        # before its checkpoint is on disk.
        if event.kind == "checkpoint" and event.payload["epoch"] == 2:
            os.kill(pids["worker:0"], signal.SIGKILL)

    first = run_trial(spec=spec, on_event=kill_after_second_epoch)
    assert first.outcome.status == "failed" and first.outcome.retryable
    assert "killed by SIGKILL" in first.outcome.exit_reason
    assert first.outcome.exit_codes == {"worker:0": -signal.SIGKILL}
    assert [m["epoch"] for m in first.payloads("metric")] == [1, 2]
    assert [c["epoch"] for c in first.payloads("checkpoint")] == [1, 2]
    steps = first.phase("batch")[0]["steps_per_epoch"]

    second = run_trial(spec=spec)  # same spec, same work_dir: what a retry does
    assert second.outcome.status == "completed", second.outcome.exit_reason
    resumed = second.phase("resumed")
    assert resumed == [{"phase": "resumed", "from_epoch": 2, "optimizer_step": 2 * steps}]
    new = [m for m in second.payloads("metric") if not m.get("replayed")]
    assert [m["epoch"] for m in new] == [3, 4, 5]
    # The checkpoint's history is replayed, so a report lost with the old gang is not missing.
    replayed = [m for m in second.payloads("metric") if m.get("replayed")]
    assert replayed == [{**m, "replayed": True} for m in first.payloads("metric")]
    assert second.outcome.resumed_from_epoch == 2 and second.outcome.epochs_completed == 5
    # Cumulative training time carries over instead of restarting at zero.
    first_seconds = first.payloads("metric")[-1]["train_seconds"]
    assert new[0]["train_seconds"] > first_seconds
    assert second.outcome.final_metrics["val_accuracy"] >= 0.9
    attempts = tmp_path / "trial.runs" / "attempts"
    assert sorted(p.name for p in attempts.iterdir()) == ["001", "002"]


def test_a_progress_file_a_power_cut_left_empty_resumes_from_the_checkpoint_alone(
    tmp_path: Path,
    digits_module: str,
    run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> None:
    """Progress files are not fsynced (TF fsyncs no checkpoint either): after a power cut the
    renamed file may be empty. The checkpoint it belongs to still resumes the trial."""
    hyperparameters = {"epochs": 2, "batch_size": 32, "learning_rate": 0.01}
    spec = make_spec(work_dir=tmp_path / "trial", model=digits_module,
                     hyperparameters=hyperparameters)
    first = run_trial(spec=spec)
    assert first.outcome.status == "completed", first.outcome.exit_reason
    steps = first.phase("batch")[0]["steps_per_epoch"]
    progress = tmp_path / "trial" / "checkpoints" / f"progress-{2 * steps}.json"
    assert progress.is_file()
    progress.write_bytes(b"")

    longer = make_spec(work_dir=tmp_path / "trial", model=digits_module,
                       hyperparameters={**hyperparameters, "epochs": 3})
    second = run_trial(spec=longer)
    assert second.outcome.status == "completed", second.outcome.exit_reason
    assert second.phase("resumed") == [{"phase": "resumed", "from_epoch": 2,
                                        "optimizer_step": 2 * steps}]
    assert [m["epoch"] for m in second.payloads("metric")] == [3]  # no history to replay
    assert second.outcome.epochs_completed == 3


@pytest.mark.parametrize(
    "resources",
    [Resources(workers=2), Resources(workers=2, parameter_servers=1)],
    ids=["multi_worker", "parameter_server"],
)
def test_cancel_stops_every_process_within_the_grace_period(
    tmp_path: Path,
    digits_module: str,
    run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
    resources: Resources,
) -> None:
    spec = make_spec(
        work_dir=tmp_path / "trial",
        model=digits_module,
        resources=resources,
        hyperparameters={**SLOW_EPOCHS, "epochs": 100},
    )
    pids: dict[str, int] = {}
    canceled_at: list[float] = []

    def watch(event: TrialEvent) -> None:
        if event.payload.get("phase") == "launched":
            pids.update({task["task"]: task["host"] for task in event.payload["tasks"]})
        if event.kind == "metric" and not canceled_at:
            canceled_at.append(time.monotonic())

    grace = 15.0
    run = run_trial(
        spec=spec, on_event=watch, should_cancel=lambda: bool(canceled_at), grace_seconds=grace
    )
    stopped_in = time.monotonic() - canceled_at[0]
    assert run.outcome.status == "canceled" and not run.outcome.retryable
    assert stopped_in < grace + 2, run.outcome.exit_reason
    assert len(pids) == len(run.outcome.exit_codes) == (2 if not resources.parameter_servers else 4)
    assert all(code is not None for code in run.outcome.exit_codes.values())
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # The checkpoint of the completed epoch is what a later resume starts from.
    steps = run.phase("batch")[0]["steps_per_epoch"]
    assert (tmp_path / "trial" / "checkpoints" / f"progress-{steps}.json").is_file()


def test_a_stop_mid_epoch_is_checkpointed_and_the_rerun_trains_only_the_rest_of_that_epoch(
    tmp_path: Path,
    digits_module: str,
    run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> None:
    epochs = 4
    spec = make_spec(work_dir=tmp_path / "trial", model=digits_module,
                     hyperparameters={**SLOW_EPOCHS, "epochs": epochs, "batch_size": 2,
                                      "throughput_interval_seconds": 0.5})
    reported: list[int] = []
    plan: dict[str, int] = {}
    stop: list[bool] = []

    def watch(event: TrialEvent) -> None:
        if event.payload.get("phase") == "batch":
            plan["steps"] = event.payload["steps_per_epoch"]
        if event.kind == "metric":
            reported.append(event.payload["epoch"])
        # Early in an epoch (about 2 s long, longer on a loaded machine), so the stop lands
        # before its validation starts.
        if event.kind == "throughput" and plan:
            into = event.payload["optimizer_step"] % plan["steps"] / plan["steps"]
            stop.append(0.05 < into < 0.35)

    # The cancel asked for often, not every second (the supervisor's default): a second's delay
    # on a loaded machine let the stop land in the epoch's validation or the next epoch's start.
    first = run_trial(spec=spec, on_event=watch, should_cancel=lambda: any(stop),
                      cancel_check_seconds=0.1)
    assert first.outcome.status == "canceled", first.outcome.exit_reason
    steps = first.phase("batch")[0]["steps_per_epoch"]
    on_stop = first.payloads("checkpoint")[-1]
    stopped_after, done = on_stop["epoch"], on_stop["epoch_steps"]
    assert reported == list(range(1, stopped_after + 1)), reported
    assert 0 < done < steps, on_stop
    checkpoints = tmp_path / "trial" / "checkpoints"
    assert f'model_checkpoint_path: "ckpt-{stopped_after * steps + done}"' in (
        checkpoints / "checkpoint").read_text()

    second = run_trial(spec=spec)
    assert second.outcome.status == "completed", second.outcome.exit_reason
    assert second.phase("resumed") == [{
        "phase": "resumed", "from_epoch": stopped_after, "from_step": done,
        "optimizer_step": stopped_after * steps + done}]
    new = [m for m in second.payloads("metric") if not m.get("replayed")]
    assert [(m["epoch"], m.get("resumed_at_step")) for m in new] == [
        (stopped_after + 1, done), *((e, None) for e in range(stopped_after + 2, epochs + 1))]
    # Exactly the epoch's remaining steps ran: the optimizer ends at whole epochs.
    assert second.payloads("throughput")[-1]["optimizer_step"] == epochs * steps
    assert second.outcome.epochs_completed == epochs
    assert second.outcome.final_metrics["val_accuracy"] >= 0.85
    # Training time carries over, the part of the epoch trained before the stop included.
    assert new[0]["train_seconds"] > new[0]["epoch_seconds"] + 0.1


def test_a_time_cadence_checkpoints_within_long_epochs_and_skips_short_ones(
    tmp_path: Path,
    digits_module: str,
    run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> None:
    # val_loss falls every epoch, so under "max" only the first epoch is ever the best.
    spec = make_spec(work_dir=tmp_path / "often", model=digits_module,
                     target_metric="val_loss", target_mode="max",
                     # Batches of 1: epochs of ~1,400 steps, which on a quiet machine still
                     # outlast the interval (of 4, an epoch could end within it).
                     hyperparameters={**SLOW_EPOCHS, "epochs": 2, "batch_size": 1,
                                      "checkpoint_interval_seconds": 0.3})
    often = run_trial(spec=spec)
    assert often.outcome.status == "completed", often.outcome.exit_reason
    saved = [(c["epoch"], c.get("epoch_steps", 0)) for c in often.payloads("checkpoint")]
    assert saved[0] == (0, saved[0][1]) and saved[0][1] > 0, saved  # within the first epoch
    assert (1, 0) in saved and saved[-1] == (2, 0), saved
    assert any(epoch == 1 and steps > 0 for epoch, steps in saved), saved

    spec = make_spec(work_dir=tmp_path / "rarely", model=digits_module,
                     target_metric="val_loss", target_mode="max",
                     hyperparameters={"epochs": 4, "checkpoint_interval_seconds": 3600.0})
    rarely = run_trial(spec=spec)
    assert rarely.outcome.status == "completed", rarely.outcome.exit_reason
    assert rarely.phase("training")[0]["checkpoint_interval_seconds"] == 3600.0
    # The best epoch (its weights are the best's) and the last; none in between.
    assert [(c["epoch"], c["best"]) for c in rarely.payloads("checkpoint")] == [
        (1, True), (4, False)]
    assert [m["epoch"] for m in rarely.payloads("metric")] == [1, 2, 3, 4]
