"""Feeds a trial the events the training engine emits, through the platform's real recorder."""

import time

from tfplatform.experiments.models import Trial
from tfplatform.experiments.services.recording import TrialEventRecorder
from training.spec import TrialEvent


def epochs_report(
    *, trial: Trial, epochs: range, images_per_sec: float = 400.0, start: float | None = None
) -> None:
    """Each epoch as the chief reports it: a throughput sample mid-epoch, then epoch metrics."""
    record = TrialEventRecorder(trial=trial)
    start = time.time() - 60 if start is None else start
    for epoch in epochs:
        record([
            TrialEvent(
                kind="throughput",
                payload={"epoch": epoch, "images_per_sec": images_per_sec - 50},
                task="worker:0",
                time=start + 10 * epoch - 5,
            ),
            TrialEvent(
                kind="metric",
                payload={
                    "epoch": epoch,
                    "loss": 1.0 / epoch,
                    "accuracy": 0.5 + epoch / 10,
                    "val_loss": 1.2 / epoch,
                    "val_accuracy": 0.45 + epoch / 10,
                    "epoch_seconds": 10.0,
                    "images_per_sec": images_per_sec + epoch,
                },
                task="worker:0",
                time=start + 10 * epoch,
            ),
        ])


def strategy_report(*, trial: Trial, strategy: str, reason: str) -> None:
    TrialEventRecorder(trial=trial)([
        TrialEvent(
            kind="status",
            payload={"phase": "strategy", "strategy": strategy, "reason": reason},
            task="worker:0",
        )
    ])
