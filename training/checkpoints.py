"""Per-epoch checkpoints in the trial's work_dir, so a restarted trial resumes where it stopped.

Layout (work_dir survives restarts of the same trial):
    checkpoints/epoch-<n>.*        model + optimizer state after n completed epochs (last 2 kept)
    checkpoints/progress-<n>.json  epochs done, cumulative training seconds, per-epoch history
    best/epoch-<n>.*               the epoch with the best val_accuracy (older bests deleted)

The progress file of epoch n is written *before* checkpoint n is registered, and TF registers a
checkpoint (the `checkpoint` index file) only after its data is complete, so a crash at any moment
leaves the latest registered checkpoint and its progress consistent.

With MultiWorkerMirroredStrategy every worker must take part in a save (reading sync-on-read
variables is a collective), so non-chief workers write to a scratch directory that they delete;
all workers restore the chief's files. The parameter-server chief saves alone.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from training.errors import UserCodeError
from training.tfenv import tf


@dataclass
class Progress:
    epochs_completed: int = 0
    train_seconds: float = 0.0
    best_val_accuracy: float | None = None
    best_epoch: int = 0
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
        progress_file = self.chief_dir / f"progress-{number}.json"
        if progress_file.exists():
            return Progress(**json.loads(progress_file.read_text()))
        return Progress(epochs_completed=number)

    def save(self, *, progress: Progress) -> str:
        number = progress.epochs_completed
        if self.is_chief:
            self.chief_dir.mkdir(parents=True, exist_ok=True)
            (self.chief_dir / f"progress-{number}.json").write_text(json.dumps(asdict(progress)))
            path = str(self.manager.save(checkpoint_number=number))
            # Progress files of checkpoints the manager rotated out.
            kept = {Path(p).name.rsplit("-", 1)[1] for p in self.manager.checkpoints}
            for old in self.chief_dir.glob("progress-*.json"):
                if old.stem.rsplit("-", 1)[1] not in kept:
                    old.unlink()
            return path
        self.manager.save(checkpoint_number=number)
        shutil.rmtree(self.scratch, ignore_errors=True)
        return ""

    def save_best(self, *, epoch: int) -> str:
        directory = self.best_dir if self.is_chief else self.scratch / "best"
        path = str(self.best.write(str(directory / f"epoch-{epoch}")))
        if not self.is_chief:
            shutil.rmtree(self.scratch, ignore_errors=True)
            return ""
        # The new best is complete on disk before the previous one goes.
        for old in directory.iterdir():
            if not old.name.startswith(f"epoch-{epoch}."):
                old.unlink()
        return path
