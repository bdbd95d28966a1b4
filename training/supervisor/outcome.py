"""Folds a trial's events and exit codes into a `TrialOutcome` (TF-free, used by the supervisor).

Exit codes (see worker.py) decide retryability: the user's code or data failing is never retried;
a task killed by a signal (OOM killer, SIGKILL, node loss: negative codes, 137), failing in the
cluster (lost peer, unavailable device) or on a full disk (the node's, not the trial's) is.
"""

from __future__ import annotations

import signal
from typing import Any

from training.exit_codes import (
    EXIT_INFRA_ERROR,
    EXIT_INTERNAL,
    EXIT_NO_SPACE,
    EXIT_OK,
    EXIT_PREEMPTED,
    EXIT_USER_ERROR,
    NO_SPACE_HINT,
)
from training.spec import OutcomeStatus, TrialEvent, TrialOutcome


def exit_describe(*, code: int) -> tuple[bool, str]:
    """(retryable, what happened) for one task's exit code."""
    if code == EXIT_OK:
        return False, "finished"
    if code == EXIT_USER_ERROR:
        return False, "user code or data error"
    if code == EXIT_INFRA_ERROR:
        return True, "infrastructure error"
    if code == EXIT_NO_SPACE:
        return True, NO_SPACE_HINT
    if code == EXIT_INTERNAL:
        return False, "internal platform error"
    if code == EXIT_PREEMPTED:
        return True, "terminated by SIGTERM (checkpoint kept)"
    if code < 0 or code > 128:
        number = -code if code < 0 else code - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        hint = " (out of memory, or killed externally)" if number == signal.SIGKILL else ""
        return True, f"killed by {name}{hint}"
    return False, f"exited with code {code}"


class OutcomeBuilder:
    """Remembers what the tasks reported; the chief's reports win for trial-wide facts."""

    def __init__(self, *, chief: str) -> None:
        self.chief = chief
        self.facts: dict[str, Any] = {}
        self.final_metrics: dict[str, Any] = {}
        self.devices: list[dict[str, Any]] = []
        self.placement: dict[str, Any] = {}
        self.checksums: dict[str, str] = {}
        self.errors: dict[str, dict[str, Any]] = {}
        self.pi_rates: dict[str, float] = {}

    def feed(self, event: TrialEvent) -> None:
        kind, payload, task = event.kind, event.payload, event.task
        phase = payload.get("phase")
        if kind == "status" and task == self.chief and phase == "strategy":
            self.facts.update(strategy=payload["strategy"], strategy_reason=payload["reason"],
                              replicas=payload["replicas"])
        elif kind == "status" and task == self.chief and phase == "batch":
            self.facts.update(global_batch_size=payload["global_batch_size"],
                              per_replica_batch_size=payload["per_replica_batch_size"],
                              learning_rate=payload["learning_rate"],
                              accumulation_steps=payload.get("accumulation_steps", 1))
        elif kind == "status" and task == self.chief and phase == "resumed":
            self.facts["resumed_from_epoch"] = payload["from_epoch"]
        elif kind == "metric" and payload.get("job") == "pi":
            self.pi_rates[payload["worker"]] = payload["samples_per_sec"]
        elif kind == "metric" and task == self.chief:
            self.final_metrics = dict(payload)
            self.facts["epochs_completed"] = payload.get("epoch", 0)
        elif kind == "devices":
            self.devices.extend({"task": task, **device} for device in payload["devices"])
            self.placement[task] = payload["placement"]
        elif kind == "weights":
            self.checksums[task] = payload["checksum"]
            for index, checksum in enumerate(payload.get("replica_checksums", [])):
                self.checksums[f"{task}/replica:{index}"] = checksum
        elif kind == "error":
            self.errors[task] = payload
        elif kind == "result" and task == self.chief:
            self.final_metrics = dict(payload.get("final_metrics", {}))
            for key in ("export_path", "best_checkpoint_path", "epochs_completed",
                        "resumed_from_epoch", "time_to_target_seconds", "best_metric",
                        "best_value", "best_epoch"):
                if payload.get(key) is not None:
                    self.facts[key] = payload[key]

    def build(self, *, status: OutcomeStatus, retryable: bool, exit_reason: str,
              exit_codes: dict[str, int | None], attempt_dir: str) -> TrialOutcome:
        metrics = dict(self.final_metrics)
        if self.pi_rates:
            metrics["samples_per_sec_by_worker"] = dict(sorted(self.pi_rates.items()))
        return TrialOutcome(
            status=status, retryable=retryable, exit_reason=exit_reason, exit_codes=exit_codes,
            final_metrics=metrics, devices=self.devices, placement=self.placement,
            weights_checksums=self.checksums, attempt_dir=attempt_dir, **self.facts,
        )
