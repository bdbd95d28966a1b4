"""Per-epoch checkpoints in the trial's work_dir, so a restarted trial resumes where it stopped.

Layout (work_dir survives restarts of the same trial):
    checkpoints/epoch-<n>.*        model + optimizer state after n completed epochs (last 2 kept)
    checkpoints/progress-<n>.json  epochs done, cumulative training seconds, per-epoch history
    best/epoch-<n>.*               the epoch best by the target metric (older bests deleted)

Nothing is fsynced, as TF fsyncs none of a checkpoint: a power cut may lose the last epochs, and a
progress file it leaves unreadable is read as the checkpoint's epoch count alone.

An epoch is saved in this order: its best weights (when it is the best), its progress file (written
to a temporary name and renamed), its checkpoint, which TF registers in the `checkpoint` index file
(again by rename) only after the data is complete; only then do older bests go. A crash or a full
disk at any moment leaves the latest registered checkpoint, its progress and its best intact: a
failed save removes what it half wrote, and a restore removes bests of epochs never registered.

With MultiWorkerMirroredStrategy every worker must take part in a save (reading sync-on-read
variables is a collective), so non-chief workers write to a scratch directory that they delete;
all workers restore the chief's files. The parameter-server chief saves alone.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from training.errors import UserCodeError
from training.trial.tfenv import tf


@dataclass
class Progress:
    epochs_completed: int = 0
    train_seconds: float = 0.0
    best_val_accuracy: float | None = None
    best_epoch: int = 0
    # The target metric the best epoch was chosen by (training/target.py), and its value there.
    best_metric: str = ""
    best_value: float | None = None
    time_to_target_seconds: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


class TrainingState:
    def __init__(self, *, model: Any, work_dir: str, is_chief: bool, task: str) -> None:
        self.root = Path(work_dir)
        self.is_chief = is_chief
        self.chief_dir = self.root / "checkpoints"
        self.best_dir = self.root / "best"
        self.scratch = self.root / "tmp" / task.replace(":", "-")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        # The best epoch is kept for evaluation and export: its weights, without the optimizer's
        # slots (two more copies of every weight under Adam), are what it is for.
        self.best = tf.train.Checkpoint(model=model)
        directory = self.chief_dir if is_chief else self.scratch / "checkpoints"
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, directory=str(directory), max_to_keep=2, checkpoint_name="epoch"
        )

    def restore(self) -> Progress:
        latest = tf.train.latest_checkpoint(str(self.chief_dir))
        if latest is None:
            return Progress()
        number = int(latest.rsplit("-", 1)[1])
        try:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
        except (AssertionError, ValueError) as exc:
            raise UserCodeError(
                f"the checkpoint in {self.chief_dir} does not fit this model (was the module "
                f"changed after the trial started?): {exc}"
            ) from exc
        progress = _progress_read(self.chief_dir / f"progress-{number}.json", epochs=number)
        if self.is_chief:
            # Bests saved by an epoch that never registered, or left over by a crash before
            # the older ones went: the registered progress names the one best.
            self._best_keep(epoch=progress.best_epoch or None)
        return progress

    def save(self, *, progress: Progress, best: bool = False) -> tuple[str, str]:
        """(checkpoint path, best path) of this epoch; only the chief's are non-empty."""
        number = progress.epochs_completed
        best_path = self._save_best(epoch=number) if best else ""
        if not self.is_chief:
            self.manager.save(checkpoint_number=number)
            shutil.rmtree(self.scratch, ignore_errors=True)
            return "", ""
        self.chief_dir.mkdir(parents=True, exist_ok=True)
        try:
            _write_atomic(self.chief_dir / f"progress-{number}.json", json.dumps(asdict(progress)))
            path = str(self.manager.save(checkpoint_number=number))
        except BaseException:
            # Not registered: what this epoch half wrote only takes space a full disk lacks.
            _remove(self.chief_dir, f"progress-{number}.json", f"epoch-{number}.")
            _remove(self.best_dir, f"epoch-{number}.")
            raise
        # Progress files of checkpoints the manager rotated out, and the bests this one beat.
        kept = {Path(p).name.rsplit("-", 1)[1] for p in self.manager.checkpoints}
        for old in self.chief_dir.glob("progress-*.json"):
            if old.stem.rsplit("-", 1)[1] not in kept:
                old.unlink()
        if best:
            self._best_keep(epoch=number)
        return path, best_path

    def _save_best(self, *, epoch: int) -> str:
        directory = self.best_dir if self.is_chief else self.scratch / "best"
        try:
            path = str(self.best.write(str(directory / f"epoch-{epoch}")))
        except BaseException:
            _remove(directory, f"epoch-{epoch}.")
            raise
        if not self.is_chief:
            shutil.rmtree(self.scratch, ignore_errors=True)
            return ""
        return path

    def _best_keep(self, *, epoch: int | None) -> None:
        """Only the best of `epoch` stays (none when None)."""
        if not self.best_dir.is_dir():
            return
        for old in self.best_dir.iterdir():
            if epoch is None or not old.name.startswith(f"epoch-{epoch}."):
                old.unlink() if old.is_file() else shutil.rmtree(old, ignore_errors=True)


def _progress_read(path: Path, *, epochs: int) -> Progress:
    """The epoch's progress; without a readable one (none, or one a power cut left empty or
    torn: it is not fsynced, as TF fsyncs none of the checkpoint it belongs to), the epochs
    the checkpoint holds, with no history or best."""
    try:
        return Progress(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return Progress(epochs_completed=epochs)


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
