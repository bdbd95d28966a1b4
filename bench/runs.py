"""One training workload, run through the platform or as a plain script, as per-epoch records.

Both sides report the same things per epoch: images/sec over the epoch (Keras epoch begin → end,
validation included, as the platform's EpochReporter measures it), the wall-clock time the epoch
ended, and val_accuracy. "Steady" figures leave out the first epoch, which traces the graph.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from bench import stats
from bench.api import PlatformClient, timestamp


@dataclass(frozen=True)
class Workload:
    model: str = "mlp"
    dataset: str = "digits"
    epochs: int = 8
    batch_size: int = 32  # per replica: the platform scales the global batch with replicas
    learning_rate: float = 0.001
    hidden_units: int = 256
    target_accuracy: float = 0.95

    def hyperparameters(self) -> dict[str, Any]:
        return {
            "epochs": self.epochs, "batch_size": self.batch_size,
            "learning_rate": self.learning_rate, "hidden_units": self.hidden_units,
        }

    def describe(self) -> str:
        return (f"{self.model} ({self.hidden_units} hidden units) on {self.dataset}, "
                f"{self.epochs} epochs, batch {self.batch_size} per replica, "
                f"Adam {self.learning_rate:g}, target val_accuracy {self.target_accuracy:g}")


@dataclass(frozen=True)
class EpochRecord:
    epoch: int
    images_per_sec: float
    seconds: float
    ended_at: float  # POSIX seconds
    val_accuracy: float | None

    @property
    def images(self) -> float:
        return self.images_per_sec * self.seconds


@dataclass(frozen=True)
class TrainingRun:
    label: str
    epochs: list[EpochRecord]
    strategy: str = ""
    replicas: int = 1
    global_batch: int = 0
    time_to_target: float | None = None
    started_at: float | None = None  # wall clock just before submit / Popen
    first_step_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def steady_images_per_sec(self) -> float:
        """Median of the per-epoch rates, first epoch left out."""
        return stats.median(stats.steady([e.images_per_sec for e in self.epochs]))

    @property
    def wall_images_per_sec(self) -> float | None:
        """Images per epoch ÷ median time between consecutive epoch ends: everything between
        two epochs (checkpoints, reporting) counts, not just fit's own loop."""
        ends = [e.ended_at for e in self.epochs]
        # The gap after epoch 1 is epoch 2's cycle: tracing is over by then.
        gaps = [later - earlier for earlier, later in itertools.pairwise(ends)]
        if not gaps:
            return None
        return stats.median([e.images for e in self.epochs[1:]]) / stats.median(gaps)

    @property
    def span(self) -> tuple[float, float]:
        """Wall-clock start of the first epoch and end of the last."""
        return self.epochs[0].ended_at - self.epochs[0].seconds, self.epochs[-1].ended_at

    def steady_epochs_within(self, span: tuple[float, float]) -> list[EpochRecord]:
        """The steady epochs (first left out) that lie wholly inside `span`."""
        return [e for e in self.epochs[1:]
                if e.ended_at - e.seconds >= span[0] and e.ended_at <= span[1]]

    def steady_images_per_sec_within(self, span: tuple[float, float]) -> float | None:
        """Like steady_images_per_sec, over steady_epochs_within(span)."""
        inside = [e.images_per_sec for e in self.steady_epochs_within(span)]
        return stats.median(inside) if inside else None

    @property
    def final_val_accuracy(self) -> float | None:
        return self.epochs[-1].val_accuracy if self.epochs else None

    @property
    def first_step_seconds(self) -> float | None:
        if self.started_at is None or self.first_step_at is None:
            return None
        return self.first_step_at - self.started_at


def epochs_from_metrics(metrics: list[dict[str, Any]]) -> list[EpochRecord]:
    """Per-epoch records of the latest trial. An epoch's metrics share one event time; the
    throughput sampler's images_per_sec samples have times of their own and are left out."""
    if not metrics:
        return []
    trial = max(m["trial"] for m in metrics)
    by_time: dict[str, dict[str, Any]] = {}
    for metric in metrics:
        if metric["trial"] == trial:
            by_time.setdefault(metric["recorded_at"], {})[metric["name"]] = metric
    records = []
    for when, group in by_time.items():
        if "epoch_seconds" not in group or "images_per_sec" not in group:
            continue
        ended = timestamp(when)
        assert ended is not None
        accuracy = group.get("val_accuracy")
        records.append(EpochRecord(
            epoch=int(group["epoch_seconds"]["epoch"]),
            images_per_sec=float(group["images_per_sec"]["value"]),
            seconds=float(group["epoch_seconds"]["value"]),
            ended_at=ended,
            val_accuracy=float(accuracy["value"]) if accuracy else None,
        ))
    return sorted(records, key=lambda r: r.epoch)


def platform_run(client: PlatformClient, *, label: str, resources: dict[str, Any],
                 workload: Workload, timeout: float = 600, poll_seconds: float = 1.5
                 ) -> TrainingRun:
    started = time.time()
    created = client.experiment_submit(
        name=f"bench {label}", model=workload.model, dataset=workload.dataset,
        hyperparameters=workload.hyperparameters(), resources=resources,
        target_accuracy=workload.target_accuracy,
    )
    done = client.experiment_wait(created["id"], timeout=timeout, poll_seconds=poll_seconds)
    results = done.get("results") or {}
    return TrainingRun(
        label=label,
        epochs=epochs_from_metrics(client.metrics(created["id"])),
        strategy=str(done.get("strategy") or results.get("strategy") or ""),
        replicas=int(results.get("replicas") or 1),
        global_batch=int(results.get("global_batch_size") or 0),
        time_to_target=results.get("time_to_target_seconds"),
        started_at=started,
        first_step_at=timestamp(done.get("first_step_at")),
        extra={"experiment": created["id"], "has_first_step_at": "first_step_at" in done},
    )
