"""Turns the training engine's events into metrics, checkpoints and logs in the database."""

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from tfplatform.core.database import DATABASE_ERRORS, database_connection_reset
from tfplatform.experiments.models import Metric, Trial
from tfplatform.experiments.node_paths import node_paths_hide
from tfplatform.experiments.services.transitions import (
    experiment_set_pending_reason,
    experiment_set_strategy,
)
from tfplatform.experiments.services.trials import (
    checkpoint_record,
    metrics_record,
    metrics_supersede_epoch,
    trial_append_log,
    trial_set_first_step,
    trial_set_runtime,
)
from training.spec import TrialEvent

logger = logging.getLogger(__name__)

# Throughput arrives every few seconds; these are the names charts and benchmarks read.
THROUGHPUT_KEYS = ("images_per_sec", "images_per_sec_per_replica")
CHIEF_TASKS = ("", "worker:0", "chief:0")


class TrialEventRecorder:
    def __init__(self, *, trial: Trial) -> None:
        self.trial = trial
        self.throughput_step = 0
        self._log_lines: list[str] = []
        self._waiting: list[TrialEvent] = []  # kept while the database is away, in order
        self.waited = ""  # the pending reason its cluster's wait set, until the first step

    def __call__(self, events: Sequence[TrialEvent]) -> None:
        """One batch, one transaction: the supervisor hands over what it read in one go, and
        each commit costs the cores the trial trains on. With the database away the events
        wait here, in order, and go in with the next batch: the trial trains on."""
        self._waiting.extend(events)
        step = self.throughput_step
        try:
            self._record(self._waiting)
        except DATABASE_ERRORS:
            self.throughput_step = step  # the batch is done again as a whole
            if len(self._waiting) == len(events):
                logger.warning("Trial %s: the database is unavailable; keeping its events",
                               self.trial.pk)
            database_connection_reset()
            return
        except Exception:
            self._waiting = []  # a batch that cannot be recorded is not tried again
            raise
        self._waiting = []

    def flush(self) -> None:
        """What waited for the database; raises while it is still away."""
        if self._waiting:
            self._record(self._waiting)
            self._waiting = []

    def _record(self, events: Sequence[TrialEvent]) -> None:
        self._log_lines = []
        with transaction.atomic():
            for event in events:
                handler = getattr(self, f"_on_{event.kind}", None)
                if handler is not None:
                    handler(event)
            if self._log_lines:
                trial_append_log(trial=self.trial, text="".join(self._log_lines))

    def _when(self, event: TrialEvent) -> datetime:
        return datetime.fromtimestamp(event.time, tz=UTC)

    def _numbers(self, payload: dict[str, Any]) -> dict[str, float]:
        return {
            key: float(value)
            for key, value in payload.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        }

    def _on_metric(self, event: TrialEvent) -> None:
        numbers = self._numbers(event.payload)
        epoch = int(numbers.pop("epoch", 0))
        if event.payload.get("replayed"):
            if Metric.objects.filter(
                trial__experiment_id=self.trial.experiment_id, epoch=epoch
            ).exists():
                return
        else:
            metrics_supersede_epoch(
                trial=self.trial, epoch=epoch,
                names=[name for name in numbers if name not in THROUGHPUT_KEYS])
        metrics_record(
            trial=self.trial, values=numbers, step=epoch, epoch=epoch, recorded_at=self._when(event)
        )

    def _on_throughput(self, event: TrialEvent) -> None:
        if event.task not in CHIEF_TASKS:
            return  # every task reports the same global rate; one series is enough
        numbers = self._numbers(event.payload)
        self.throughput_step += 1
        epoch = int(numbers["epoch"]) if "epoch" in numbers else None
        metrics_record(
            trial=self.trial,
            values={name: numbers[name] for name in THROUGHPUT_KEYS if name in numbers},
            step=self.throughput_step,
            epoch=epoch,
            recorded_at=self._when(event),
        )

    def _on_status(self, event: TrialEvent) -> None:
        payload = event.payload
        runtime = str(payload.get("runtime", "")) if event.task == "supervisor" else ""
        version = str(payload.get("tensorflow_version", ""))
        if runtime or version:
            trial_set_runtime(trial=self.trial, runtime=runtime, tensorflow_version=version)
        if payload.get("phase") == "first_step":
            trial_set_first_step(trial=self.trial, at=self._when(event))
            if self.waited:
                experiment_set_pending_reason(experiment=self.trial.experiment, reason="",
                                              replacing=self.waited)
                self.waited = ""
        if payload.get("phase") == "waiting" and event.task == "supervisor":
            # What the trial's cluster keeps it waiting for (a Spark cluster without the gang's
            # slots), until its first step.
            reason = str(payload.get("reason", ""))[:300]
            experiment_set_pending_reason(experiment=self.trial.experiment, reason=reason)
            self.waited = reason
        if payload.get("strategy"):
            experiment_set_strategy(
                experiment_id=self.trial.experiment_id,
                strategy=str(payload["strategy"]),
                reason=str(payload.get("reason", payload.get("strategy_reason", ""))),
            )
        self._log(event, " ".join(f"{k}={v}" for k, v in payload.items()))

    def _on_checkpoint(self, event: TrialEvent) -> None:
        payload = event.payload
        checkpoint_record(
            trial=self.trial,
            epoch=int(payload.get("epoch", 0)),
            path=str(payload.get("path", "")),
            is_best=bool(payload.get("best", False)),
            metrics={k: v for k, v in payload.items() if k not in ("path", "epoch", "best")},
        )

    def _on_error(self, event: TrialEvent) -> None:
        self._log(event, str(event.payload.get("message") or event.payload))

    def _on_log(self, event: TrialEvent) -> None:
        text = str(event.payload.get("message") or event.payload.get("text") or event.payload)
        # What the user's code printed stays theirs, paths and all; the platform's lines not.
        self._log(event, text, own=event.payload.get("stream") == "output")

    def _on_result(self, event: TrialEvent) -> None:
        self._log(event, f"result {event.payload}")

    def _log(self, event: TrialEvent, text: str, *, own: bool = False) -> None:
        stamp = self._when(event).strftime("%H:%M:%S")
        shown = text if own else node_paths_hide(text)
        self._log_lines.append(f"{stamp} [{event.task or 'trial'}] {shown}\n")
