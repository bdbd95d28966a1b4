"""Checkpoints in the trial's work_dir, so a restarted trial resumes where it stopped.

Layout (work_dir survives restarts of the same trial):
    checkpoints/ckpt-<s>.*        model + optimizer state after s optimizer steps (last 2 kept)
    checkpoints/progress-<s>.json epochs and steps done, cumulative training seconds, history
    best/epoch-<n>.*              hard links to the checkpoint of the epoch best by the target
                                  metric (older bests deleted)

A checkpoint is taken at an epoch's end (every epoch, or on a time cadence: callbacks.py), within
an epoch when the cadence says so, and on SIGTERM at the step training stops at; s counts steps,
so one taken mid-epoch has its own name, and its progress says how far into the epoch it is.
Checkpoints of trials from before steps named them (`epoch-<n>`) still restore.

Writes are asynchronous where TF supports them (one process: the default, one-device and mirrored
strategies): TF copies the variables to host memory and writes from its own thread while training
goes on. The next save, the end of training and a stop wait for it and raise its error. The best
epoch costs no second write: its files are hard links to the checkpoint's, made when the data is
on disk, so the best keeps the optimizer's slots too (read it with
`tf.train.Checkpoint(model=m).read(path).expect_partial()`).

Nothing is fsynced, as TF fsyncs none of a checkpoint: a power cut may lose the last checkpoints,
and a progress file it leaves unreadable is read as the step count in the checkpoint's name alone.

A save goes in this order: its progress file (written to a temporary name and renamed), its
checkpoint data, the best's links (when it is the best), then TF registers the checkpoint in the
`checkpoint` index file (by rename). Only at the next save (or the end) do older progress files
and bests go. A crash or a full disk at any moment leaves the latest registered checkpoint, its
progress and its best intact: a failed save removes what it half wrote (also when training fails
on another write while it is under way), and a restore removes what a killed process left of
saves never registered and bests of epochs never registered.

With MultiWorkerMirroredStrategy every worker must take part in a save (reading sync-on-read
variables is a collective), so non-chief workers write to a scratch directory that they delete;
all workers restore the chief's files. The parameter-server chief saves alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from training.errors import UserCodeError
from training.trial.tfenv import tf

CHECKPOINT_NAME = "ckpt"
LEGACY_CHECKPOINT_NAME = "epoch"  # per-epoch numbering, before mid-epoch checkpoints


@dataclass
class Progress:
    epochs_completed: int = 0
    # Steps of the next epoch already trained: non-zero only in a checkpoint taken mid-epoch.
    epoch_steps: int = 0
    train_seconds: float = 0.0
    best_val_accuracy: float | None = None
    best_epoch: int = 0
    # The target metric the best epoch was chosen by (training/target.py), and its value there.
    best_metric: str = ""
    best_value: float | None = None
    time_to_target_seconds: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Saved:
    """A checkpoint whose data is on disk (its registration follows at once)."""

    path: str
    best_path: str  # "" unless this epoch is the best
    epochs_completed: int
    epoch_steps: int


@dataclass
class _Pending:
    number: int
    epoch: int
    best: bool


class TrainingState:
    def __init__(self, *, model: Any, work_dir: str, is_chief: bool, task: str,
                 steps_per_epoch: int, asynchronous: bool) -> None:
        self.root = Path(work_dir)
        self.is_chief = is_chief
        self.steps_per_epoch = steps_per_epoch
        self.asynchronous = asynchronous
        self.chief_dir = self.root / "checkpoints"
        self.best_dir = self.root / "best"
        self.scratch = self.root / "tmp" / task.replace(":", "-")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        directory = self.chief_dir if is_chief else self.scratch / "checkpoints"
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, directory=str(directory), max_to_keep=2,
            checkpoint_name=CHECKPOINT_NAME,
        )
        self._pending: _Pending | None = None

    def restore(self) -> Progress:
        latest = tf.train.latest_checkpoint(str(self.chief_dir))
        if self.is_chief and self.chief_dir.is_dir():
            self._unregistered_remove()
        if latest is None:
            return Progress()
        name, number = Path(latest).name.rsplit("-", 1)
        try:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
        except (AssertionError, ValueError) as exc:
            raise UserCodeError(
                f"the checkpoint in {self.chief_dir} does not fit this model (was the module "
                f"changed after the trial started?): {exc}"
            ) from exc
        if name == LEGACY_CHECKPOINT_NAME:
            fallback = Progress(epochs_completed=int(number))
        else:
            epochs, steps = divmod(int(number), self.steps_per_epoch)
            fallback = Progress(epochs_completed=epochs, epoch_steps=steps)
        progress = _progress_read(self.chief_dir / f"progress-{number}.json", fallback=fallback)
        if self.is_chief:
            # Bests saved by an epoch that never registered, or left over by a crash before
            # the older ones went: the registered progress names the one best.
            self._best_keep(epoch=progress.best_epoch or None)
        return progress

    def _unregistered_remove(self) -> None:
        """Saves a process killed mid-write left behind (its progress, data never registered,
        staging folders): they only take space, and a full disk is often why it died."""
        registered = {Path(p).name for p in self.manager.checkpoints}
        numbers = {name.rsplit("-", 1)[1] for name in registered}
        stale = set()
        for entry in self.chief_dir.iterdir():
            stem, _, _ = entry.name.partition(".")
            kind, _, number = stem.rpartition("-")
            if ((kind == "progress" and number not in numbers)
                    or (kind in (CHECKPOINT_NAME, LEGACY_CHECKPOINT_NAME)
                        and stem not in registered)):
                stale.add(f"{stem}.")
        _remove(self.chief_dir, *sorted(stale))

    def save(self, *, progress: Progress, best: bool = False,
             written: Callable[[Saved], None] | None = None) -> None:
        """Starts saving `progress` and the model as they are now; `written` is called (from
        TF's writing thread when asynchronous) once the data is on disk. Only the chief's
        checkpoint remains."""
        self.settle()
        epoch, epoch_steps = progress.epochs_completed, progress.epoch_steps
        number = epoch * self.steps_per_epoch + epoch_steps
        if not self.is_chief:
            self.manager.save(checkpoint_number=number)
            shutil.rmtree(self.scratch, ignore_errors=True)
            return
        best_prefix = str(self.best_dir / f"epoch-{epoch}") if best else ""

        def on_disk(prefix: str) -> None:
            if best:
                _link_checkpoint(source=prefix, target=best_prefix)
            if written is not None:
                written(Saved(path=prefix, best_path=best_prefix, epochs_completed=epoch,
                              epoch_steps=epoch_steps))

        pending = _Pending(number=number, epoch=epoch, best=best)
        self.chief_dir.mkdir(parents=True, exist_ok=True)
        try:
            _write_atomic(self.chief_dir / f"progress-{number}.json", json.dumps(asdict(progress)))
            options = tf.train.CheckpointOptions(enable_async=self.asynchronous,
                                                 experimental_write_callbacks=[on_disk])
            self.manager.save(checkpoint_number=number, options=options)
        except BaseException:
            self._discard(pending)
            raise
        self._pending = pending
        if not self.asynchronous:
            self.settle()

    def settle(self) -> None:
        """Waits for the save under way, raising its error; then sweeps what it replaced."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        if self.asynchronous:
            try:
                self.checkpoint.sync()
                _async_error_raise(checkpoint=self.checkpoint)
            except BaseException:
                self._discard(pending)
                raise
        # Progress files of checkpoints the manager rotated out, and the bests this one beat.
        kept = {Path(p).name.rsplit("-", 1)[1] for p in self.manager.checkpoints}
        for old in self.chief_dir.glob("progress-*.json"):
            if old.stem.rsplit("-", 1)[1] not in kept:
                old.unlink()
        if pending.best:
            self._best_keep(epoch=pending.epoch)

    def abandon(self) -> None:
        """On the way out of a training that failed: the save under way stays if it reached the
        disk, and what it half wrote goes if not. Its own error gives way to the one ending the
        training (a full disk fails the next write too, whichever it is)."""
        with contextlib.suppress(Exception):
            self.settle()

    def _discard(self, pending: _Pending) -> None:
        # Not registered: what this save half wrote only takes space a full disk lacks.
        _remove(self.chief_dir, f"progress-{pending.number}.json",
                f"{CHECKPOINT_NAME}-{pending.number}.")
        if pending.best:
            _remove(self.best_dir, f"epoch-{pending.epoch}.")

    def _best_keep(self, *, epoch: int | None) -> None:
        """Only the best of `epoch` stays (none when None)."""
        if not self.best_dir.is_dir():
            return
        for old in self.best_dir.iterdir():
            if epoch is None or not old.name.startswith(f"epoch-{epoch}."):
                old.unlink() if old.is_file() else shutil.rmtree(old, ignore_errors=True)


def _async_error_raise(*, checkpoint: Any) -> None:
    """The error of TF's last asynchronous write: `sync()` waits for it but does not raise it
    (TF raises it only at the next write or at exit), and a save that failed must not pass
    for one on disk."""
    helper = getattr(checkpoint, "_async_checkpointer_impl", None)
    if helper is not None:
        helper._check_async_thread_error()


def _link_checkpoint(*, source: str, target: str) -> None:
    """Hard links `target.<suffix>` to each `source.<suffix>` file (index and data shards)."""
    source_path = Path(source)
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    for entry in source_path.parent.glob(f"{source_path.name}.*"):
        destination = Path(f"{target}{entry.name[len(source_path.name):]}")
        destination.unlink(missing_ok=True)
        os.link(entry, destination)


def _progress_read(path: Path, *, fallback: Progress) -> Progress:
    """The checkpoint's progress; without a readable one (none, or one a power cut left empty or
    torn: it is not fsynced, as TF fsyncs none of the checkpoint it belongs to), what the
    checkpoint's name says, with no history or best."""
    try:
        return Progress(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return fallback


def _write_atomic(path: Path, text: str) -> None:
    # Renamed into place, never half written; not fsynced (a sync per epoch costs more than
    # the whole write): a power cut may lose it, and _progress_read then falls back.
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def _remove(directory: Path, *prefixes: str) -> None:
    """Entries of `directory` named `<prefix>...`, and staging leftovers: TF stages a save's
    shards in `..._temp/` folders and the index file as `checkpoint.tmp...`; ours start with a
    dot."""
    if not directory.is_dir():
        return
    for entry in directory.iterdir():
        name = entry.name
        if (name.startswith(prefixes) or name.startswith(".") or "_temp" in name
                or ".tmp" in name):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
