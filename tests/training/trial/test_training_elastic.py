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

# Global batches of 8: epochs of 168 steps, long enough for a stop to land within one.
HPARAMS = {"epochs": 2, "batch_size": 2, "learning_rate": 0.005}
# Measured: within 8e-7 (relative); the sums merely run in another order.
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
    assert (plan["replicas"], plan["accumulation_steps"], plan["global_batch_size"]) == (2, 2, 8)
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


# A well-conditioned setting for comparing across process layouts: a small rate on global batches
# of 16 (per-replica 4 at the target of 4), so float rounding is not amplified into divergence.
MULTI_WORKER_HPARAMS = {"epochs": 2, "batch_size": 4, "learning_rate": 0.0005}
# Measured: within 2e-7 (relative) on loss and val_loss, accuracies identical; the sums merely
# run in another order (a collective all-reduce across processes).
MULTI_WORKER_RTOL = 1e-5


def test_two_workers_of_one_replica_accumulating_match_four_replicas_in_one_process(
    tmp_path: Path, digits_module: str, run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> None:
    """MultiWorkerMirroredStrategy at half the target: the auto-shard by data (after TF rebatches
    each global batch into one piece per replica of all workers) hands worker w the w-th half of
    every global batch, so its 2 micro-batches are what replicas 2w and 2w+1 take at 4. (With
    several replicas per worker, local replica j of worker w of W takes piece w + j*W instead: the
    micro-batches are still the full size's per-replica batches, on other replica ids.)"""

    def spec(work: str, resources: Resources) -> Any:
        return make_spec(work_dir=tmp_path / work, model=digits_module,
                         hyperparameters=MULTI_WORKER_HPARAMS, resources=resources)

    whole = run_trial(spec=spec("whole", Resources(gpus_per_worker=4, replicas_target=4)))
    assert whole.outcome.status == "completed", whole.outcome.exit_reason
    assert (whole.outcome.strategy, whole.outcome.replicas) == ("MirroredStrategy", 4)
    split = run_trial(spec=spec("split", Resources(workers=2, replicas_target=4)))
    assert split.outcome.status == "completed", split.outcome.exit_reason
    assert (split.outcome.strategy, split.outcome.replicas) == ("MultiWorkerMirroredStrategy", 2)
    assert set(split.outcome.exit_codes) == {"worker:0", "worker:1"}

    [full] = whole.phase("batch")
    assert (full["replicas"], full["accumulation_steps"], full["global_batch_size"]) == (4, 1, 16)
    for task in ("worker:0", "worker:1"):
        [plan] = split.phase("batch", task=task)
        assert (plan["replicas"], plan["accumulation_steps"], plan["per_replica_batch_size"],
                plan["global_batch_size"], plan["steps_per_epoch"]) == (
            2, 2, 4, full["global_batch_size"], full["steps_per_epoch"]), (task, plan)
        assert plan["learning_rate"] == full["learning_rate"] == pytest.approx(0.002)
    steps = full["steps_per_epoch"]
    assert split.payloads("throughput")[-1]["optimizer_step"] == (
        MULTI_WORKER_HPARAMS["epochs"] * steps)

    expected = _by_epoch(whole.payloads("metric"))
    got = _by_epoch(split.payloads("metric"))
    assert sorted(got) == sorted(expected) == [1, 2]
    for epoch, metrics in got.items():
        for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
            assert metrics[key] == pytest.approx(expected[epoch][key], rel=MULTI_WORKER_RTOL), (
                epoch, key, metrics[key], expected[epoch][key])
    # Synchronous workers end with the same weights.
    checksums = split.outcome.weights_checksums
    assert len(set(checksums.values())) == 1, checksums
