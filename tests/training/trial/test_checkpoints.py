"""TrainingState on real TensorFlow checkpoints: asynchronous writes, the best as hard links,
errors of the writing thread, checkpoints written before steps named them, and where a stop's
checkpoint lands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from training.events import EventWriter
from training.scaling import batch_plan
from training.signals import Preempted, StopFlag
from training.target import target_make
from training.trial.callbacks import Cadence, EpochReporter, StopAtStep
from training.trial.checkpoints import Progress, Saved, TrainingState
from training.trial.tfenv import keras, tf

STEPS = 10


def _model() -> Any:
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def _state(work_dir: Path, *, model: Any | None = None, asynchronous: bool = True
           ) -> TrainingState:
    return TrainingState(model=model or _model(), work_dir=str(work_dir), is_chief=True,
                         task="worker:0", steps_per_epoch=STEPS, asynchronous=asynchronous)


def _train_one_step(model: Any) -> None:
    model.train_on_batch(np.ones((2, 4), np.float32), np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "sync"])
def test_the_best_is_hard_links_to_its_checkpoint_and_only_the_latest_best_stays(
    tmp_path: Path, asynchronous: bool
) -> None:
    state = _state(tmp_path, asynchronous=asynchronous)
    written: list[Saved] = []
    for epoch, best in ((1, True), (2, False), (3, True)):
        _train_one_step(state.checkpoint.model)
        state.save(progress=Progress(epochs_completed=epoch, best_epoch=1 if epoch < 3 else 3),
                   best=best, written=written.append)
    state.settle()

    assert [(s.epochs_completed, Path(s.path).name, bool(s.best_path)) for s in written] == [
        (1, "ckpt-10", True), (2, "ckpt-20", False), (3, "ckpt-30", True)]
    best = sorted(p.name for p in (tmp_path / "best").iterdir())
    assert best == ["epoch-3.data-00000-of-00001", "epoch-3.index"]
    for name in best:
        linked = (tmp_path / "best" / name).stat()
        source = (tmp_path / "checkpoints" / name.replace("epoch-3", "ckpt-30")).stat()
        assert (linked.st_ino, linked.st_nlink) == (source.st_ino, 2)
    # Two checkpoints kept, each with its progress; the first epoch's went with its checkpoint.
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("progress-*")) == [
        "progress-20.json", "progress-30.json"]
    # The best reads as the model's weights alone, as users read it.
    reader = _model()
    tf.train.Checkpoint(model=reader).read(written[-1].best_path).expect_partial()
    for mine, theirs in zip(reader.get_weights(), state.checkpoint.model.get_weights(),
                            strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_a_mid_epoch_checkpoint_restores_its_steps_and_optimizer_state(tmp_path: Path) -> None:
    state = _state(tmp_path)
    for _ in range(3):
        _train_one_step(state.checkpoint.model)
    state.save(progress=Progress(epochs_completed=1, epoch_steps=3, train_seconds=1.5))
    state.settle()

    model = _model()
    progress = _state(tmp_path, model=model).restore()
    assert (progress.epochs_completed, progress.epoch_steps, progress.train_seconds) == (1, 3, 1.5)
    assert int(model.optimizer.iterations.numpy()) == 3
    # Without its progress file, the checkpoint's name says how far it got.
    (tmp_path / "checkpoints" / "progress-13.json").write_bytes(b"")
    progress = _state(tmp_path).restore()
    assert (progress.epochs_completed, progress.epoch_steps, progress.history) == (1, 3, [])


def test_a_checkpoint_named_by_epoch_before_steps_named_them_still_restores(
    tmp_path: Path,
) -> None:
    model = _model()
    _train_one_step(model)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    tf.train.CheckpointManager(checkpoint, directory=str(tmp_path / "checkpoints"),
                               max_to_keep=2, checkpoint_name="epoch").save(checkpoint_number=2)

    restored = _model()
    state = _state(tmp_path, model=restored)
    assert state.restore().epochs_completed == 2  # no progress file: the name's epoch count
    assert int(restored.optimizer.iterations.numpy()) == 1
    state.save(progress=Progress(epochs_completed=3))
    state.settle()
    assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-30")


def test_an_error_in_the_writing_thread_is_raised_and_the_save_removed(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.save(progress=Progress(epochs_completed=1), best=True)
    state.settle()

    def fail(saved: Saved) -> None:
        raise OSError(28, "No space left on device")

    state.save(progress=Progress(epochs_completed=2, best_epoch=2), best=True, written=fail)
    with pytest.raises(OSError, match="No space left"):
        state.settle()
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    assert not [n for n in names if n.startswith(("ckpt-20", "progress-20"))], names
    assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-10")
    assert sorted(p.name for p in (tmp_path / "best").iterdir()) == [
        "epoch-1.data-00000-of-00001", "epoch-1.index"]
    # The next save goes through.
    state.save(progress=Progress(epochs_completed=3))
    state.settle()
    assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-30")


class _StopAt(keras.callbacks.Callback):
    """SIGTERM's effect (the flag set) at a chosen step, before StopAtStep looks at it."""

    def __init__(self, *, flag: StopFlag, epoch: int, batch: int) -> None:
        super().__init__()
        self.flag, self.at, self.epoch = flag, (epoch, batch), 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.epoch = epoch

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if (self.epoch, batch) == self.at:
            self.flag.requested_at = 1.0
            self.flag.signals.append(15)


@pytest.mark.parametrize(("batch", "saved"), [(1, (1, 2)), (4, (2, 0))],
                         ids=["mid_epoch", "last_step"])
def test_a_stop_is_checkpointed_where_it_lands_and_the_last_step_waits_for_its_epoch(
    tmp_path: Path, batch: int, saved: tuple[int, int]
) -> None:
    """Five steps an epoch; the stop comes in the second epoch. Mid-epoch: that step is
    checkpointed. At the epoch's last step: the epoch ends (validated, checkpointed whole) and
    the next one's start stops."""
    model = _model()
    state = _state(tmp_path, model=model)
    progress = Progress()
    flag = StopFlag()
    events = EventWriter(fd=os.open(tmp_path / "events", os.O_WRONLY | os.O_CREAT), task="w",
                         trial_id="t")
    reporter = EpochReporter(
        events=events, state=state, progress=progress,
        batch=batch_plan(batch_size=2, replicas=1, learning_rate=0.01, scale=False,
                         warmup_epochs=0),
        steps_per_epoch=5, epochs=4, interval_seconds=60.0,
        target=target_make(metric="val_loss", mode="min", value=None), stop_at_target=False,
        is_chief=True, cadence=Cadence())
    x, y = np.ones((10, 4), np.float32), np.zeros((10, 3), np.float32)
    with pytest.raises(Preempted):
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(2).repeat(), epochs=4,
                  steps_per_epoch=5, validation_data=(x, y), verbose=0,
                  callbacks=[_StopAt(flag=flag, epoch=1, batch=batch),
                             StopAtStep(flag=flag, reporter=reporter), reporter])
    restored = _state(tmp_path).restore()
    assert (restored.epochs_completed, restored.epoch_steps) == saved
    assert [record["epoch"] for record in restored.history] == list(range(1, saved[0] + 1))


def test_a_save_under_way_when_training_fails_elsewhere_stays_if_written_or_goes(
    tmp_path: Path,
) -> None:
    # A full disk fails the save's write and, before the next save looks at it, another write
    # (an event file, a summary): the failed save's half must go all the same.
    state = _state(tmp_path)
    state.save(progress=Progress(epochs_completed=1))
    state.settle()

    def fail(saved: Saved) -> None:
        raise OSError(28, "No space left on device")

    state.save(progress=Progress(epochs_completed=2), written=fail)
    state.abandon()
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    assert not [n for n in names if n.startswith(("ckpt-20", "progress-20"))], names
    assert "progress-10.json" in names
    # One that reached the disk stays registered.
    state.save(progress=Progress(epochs_completed=3))
    state.abandon()
    assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-30")


def test_a_restore_removes_what_a_killed_process_left_of_unregistered_saves(
    tmp_path: Path,
) -> None:
    state = _state(tmp_path, asynchronous=False)
    state.save(progress=Progress(epochs_completed=1))
    checkpoints = tmp_path / "checkpoints"
    registered = sorted(os.listdir(checkpoints))
    # What a process killed in the middle of the next save leaves: its progress, its data
    # (written, never registered) and a staging folder.
    for name in ("ckpt-10.index", "ckpt-10.data-00000-of-00001"):
        (checkpoints / name.replace("10", "20")).write_bytes((checkpoints / name).read_bytes())
    (checkpoints / "progress-20.json").write_text('{"epochs_completed": 2}')
    (checkpoints / "ckpt-30_temp").mkdir()

    progress = _state(tmp_path).restore()
    assert progress.epochs_completed == 1
    assert sorted(os.listdir(checkpoints)) == registered
