"""The work disk (a small tmpfs of the test's own) fills up mid-training: the trial fails with a
retryable "no space" reason that blames the node; the last registered checkpoint is whole and
nothing of the failed epoch is left on disk; once space is freed the same trial resumes from it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.disks import disk_fill, disk_free, tmpfs_mounted
from training.errors import no_space
from training.exit_codes import EXIT_NO_SPACE
from training.spec import TrialEvent
from training.supervisor.outcome import exit_describe

pytestmark = pytest.mark.slow

# Small batches: an epoch lasts about a second, so the disk fills while training goes on.
SLOW_EPOCHS = {"epochs": 6, "batch_size": 4, "learning_rate": 0.005}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs_mounted(path=tmp_path / "disk", megabytes=48) as path:
        yield path


def test_a_full_disk_fails_the_trial_retryably_and_a_rerun_resumes_from_the_last_checkpoint(
    small_disk: Path, digits_module: str, run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> None:
    spec = make_spec(work_dir=small_disk / "trial", model=digits_module,
                     hyperparameters=SLOW_EPOCHS)

    def fill_after_second_epoch(event: TrialEvent) -> None:
        # Once its checkpoint is written, not once its metric is out: the metric leaves while
        # the asynchronous save is still writing, which a disk filled then would fail.
        if event.kind == "checkpoint" and event.payload["epoch"] == 2:
            disk_fill(path=small_disk)

    first = run_trial(spec=spec, on_event=fill_after_second_epoch)
    assert first.outcome.status == "failed" and first.outcome.retryable
    assert first.outcome.exit_codes == {"worker:0": EXIT_NO_SPACE}
    assert "no space left on the node's work disk" in first.outcome.exit_reason
    assert "not the trial's" in first.outcome.exit_reason
    saved = [c["epoch"] for c in first.payloads("checkpoint")]
    last = saved[-1]
    assert saved == list(range(1, last + 1)) and 2 <= last < SLOW_EPOCHS["epochs"]

    checkpoints = small_disk / "trial" / "checkpoints"
    steps = first.phase("batch")[0]["steps_per_epoch"]
    index = (checkpoints / "checkpoint").read_text()
    assert f'model_checkpoint_path: "ckpt-{last * steps}"' in index
    # Nothing of the epoch that could not be saved, and no staging leftovers.
    names = sorted(p.name for p in checkpoints.iterdir())
    unsaved = (last + 1) * steps
    assert not [n for n in names if n.startswith(f"ckpt-{unsaved}.") or "tmp" in n
                or "_temp" in n or n.startswith(f"progress-{unsaved}")], names
    progress = json.loads((checkpoints / f"progress-{last * steps}.json").read_text())
    assert progress["epochs_completed"] == last
    best = sorted(p.name for p in (small_disk / "trial" / "best").iterdir())
    assert all(name.startswith(f"epoch-{progress['best_epoch']}.") for name in best), best

    disk_free(path=small_disk)
    second = run_trial(spec=spec)
    assert second.outcome.status == "completed", second.outcome.exit_reason
    assert second.outcome.resumed_from_epoch == last
    new = [m["epoch"] for m in second.payloads("metric") if not m.get("replayed")]
    assert new == list(range(last + 1, SLOW_EPOCHS["epochs"] + 1))
    assert second.outcome.final_metrics["val_accuracy"] >= 0.9


def test_a_disk_full_before_the_attempt_starts_is_retryable_and_says_so(
    small_disk: Path, digits_module: str, run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
) -> None:
    disk_fill(path=small_disk)
    run = run_trial(spec=make_spec(work_dir=small_disk / "trial", model=digits_module))
    assert run.outcome.status == "failed" and run.outcome.retryable
    assert "could not start: no space left on the node's work disk" in run.outcome.exit_reason


def test_no_space_is_recognised_in_tensorflow_errors_and_wrapped_os_errors() -> None:
    import tensorflow as tf

    # What TF raises when a checkpoint write meets ENOSPC: not out of memory.
    full = tf.errors.ResourceExhaustedError(None, None, "epoch-3.index; No space left on device")
    assert no_space(full)
    assert not no_space(tf.errors.ResourceExhaustedError(None, None, "OOM when allocating"))
    try:
        try:
            raise OSError(28, "No space left on device")
        except OSError as error:
            raise RuntimeError("while saving") from error
    except RuntimeError as wrapped:
        assert no_space(wrapped)
    assert exit_describe(code=EXIT_NO_SPACE)[0] is True
