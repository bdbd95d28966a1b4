"""An elastic trial shrunk mid-epoch and grown back trains as if it had kept its largest size.

Real trial processes on emulated devices: one run at 4 replicas throughout; another at 2 replicas
(2 accumulation steps), stopped mid-epoch as the scheduler's shrink or grow stops it, then resumed
on 4 from that checkpoint. Same seed: the same batches in the same order (array pipelines resume
at their exact batch) and the same updates, so the epochs agree within float tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from training.spec import Resources, TrialEvent

pytestmark = pytest.mark.slow

# Global batches of 4: epochs of 336 steps, long enough for a stop to land within one.
HPARAMS = {"epochs": 2, "batch_size": 1, "learning_rate": 0.005}
# Measured: within 4e-7 (relative); the sums merely run in another order.
RTOL = 1e-5


def _by_epoch(metrics: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {m["epoch"]: m for m in metrics if not m.get("replayed")}


def test_a_trial_shrunk_mid_epoch_and_grown_back_matches_one_that_kept_its_size(
    tmp_path: Path, digits_module: str, run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> None:
    def spec(work: str, gpus: int) -> Any:
        return make_spec(work_dir=tmp_path / work, model=digits_module, hyperparameters=HPARAMS,
                         resources=Resources(gpus_per_worker=gpus, replicas_target=4))

    whole = run_trial(spec=spec("whole", 4))
    assert whole.outcome.status == "completed", whole.outcome.exit_reason
    steps = whole.phase("batch")[0]["steps_per_epoch"]
    stop: list[bool] = []

    def watch(event: TrialEvent) -> None:
        # Right after the first step, so the stop lands within the first epoch.
        stop.append(event.payload.get("phase") == "first_step")

    small = run_trial(spec=spec("elastic", 2), on_event=watch, should_cancel=lambda: any(stop),
                      cancel_check_seconds=0.1)
    assert small.outcome.status == "canceled", small.outcome.exit_reason
    [plan] = small.phase("batch")
    assert (plan["replicas"], plan["accumulation_steps"], plan["global_batch_size"]) == (2, 2, 4)
    assert plan["learning_rate"] == whole.phase("batch")[0]["learning_rate"] == pytest.approx(0.02)
    on_stop = small.payloads("checkpoint")[-1]
    assert on_stop["epoch"] == 0 and 0 < on_stop.get("epoch_steps", 0) < steps, on_stop

    grown = run_trial(spec=spec("elastic", 4))
    assert grown.outcome.status == "completed", grown.outcome.exit_reason
    assert grown.phase("batch")[0]["accumulation_steps"] == 1
    [resumed] = grown.phase("resumed")
    assert (resumed["from_epoch"], resumed["from_step"]) == (
        on_stop["epoch"], on_stop["epoch_steps"])
    assert grown.payloads("throughput")[-1]["optimizer_step"] == HPARAMS["epochs"] * steps

    expected = _by_epoch(whole.payloads("metric"))
    got = {**_by_epoch(small.payloads("metric")), **_by_epoch(grown.payloads("metric"))}
    assert sorted(got) == sorted(expected) == [1, 2]
    assert got[1]["resumed_at_step"] == on_stop["epoch_steps"] and "resumed_at_step" not in got[2]
    for epoch, metrics in got.items():
        # Validation sees the epoch's final weights; the interrupted epoch's training loss
        # averages only the steps after the resume.
        keys = ["val_loss", "val_accuracy"]
        if "resumed_at_step" not in metrics:
            keys += ["loss", "accuracy"]
        for key in keys:
            assert metrics[key] == pytest.approx(expected[epoch][key], rel=RTOL), (epoch, key)
