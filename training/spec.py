"""Plain, JSON-serialisable records crossing the boundary between the platform and a trial.

Design: the web/worker side builds a `TrialSpec`, `supervisor.trial_supervise` writes it to disk and
hands the path to each trial process (`python -m training.trial.worker`). Trial processes report
back with `TrialEvent` JSON lines, and the supervisor folds those plus the exit codes into a
`TrialOutcome`.
Nothing here imports TensorFlow or Django, so both sides can use these types freely.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

EventKind = Literal[
    "status",  # lifecycle: phase=launching|started|strategy|resumed|training|exporting|...
    "metric",  # one finished epoch: loss, accuracy, val_loss, val_accuracy, epoch_seconds, ...
    "throughput",  # images/sec, global and per replica, every few seconds during an epoch
    "checkpoint",  # a checkpoint was written (epoch, path, best)
    "devices",  # device capabilities and variable placement of one task
    "weights",  # checksum of the final weights of one task (sync strategies: equal everywhere)
    "export",  # SavedModel written (path, signature)
    "result",  # the chief's final summary (metrics, export path, pi estimate, ...)
    "error",  # a failure, with category user|infra and the traceback tail
    "log",  # free text (supervisor notices, task exits)
]
EVENT_KINDS: tuple[str, ...] = (
    "status", "metric", "throughput", "checkpoint", "devices", "weights", "export", "result",
    "error", "log",
)
OutcomeStatus = Literal["completed", "failed", "canceled"]


@dataclass(frozen=True)
class Resources:
    """What the scheduler granted: the strategy is derived from this, never chosen by the user."""

    workers: int = 1
    gpus_per_worker: int = 0
    parameter_servers: int = 0
    # Physical GPU indices granted on this node; worker i gets gpu_ids[i*k:(i+1)*k]. Empty means
    # "the first k per worker", which is also what the CPU-only emulation uses.
    gpu_ids: tuple[int, ...] = ()
    # CPU slots a worker without GPUs holds on its node (a workspace may ask for several); its
    # container's memory and CPU weight scale with them. Chief and ps tasks hold one.
    cpu_slots_per_worker: int = 1
    # The granted GPU slots are devices NVML found (not emulated): TensorFlow must see them.
    gpus_physical: bool = False
    # A worker's share of its one GPU (thousandths; 0: whole GPUs), the memory TensorFlow may
    # take on it (MB; 0: no limit), and whether the node's MPS bounds the share too.
    gpu_share_milli: int = 0
    gpu_memory_limit_mb: int = 0
    gpu_mps: bool = False
    # The replicas an elastic experiment's global batch is defined for (its largest size); a
    # smaller grant keeps that batch by accumulating gradients (training/scaling.py). 0: the
    # global batch follows the replicas granted (not elastic).
    replicas_target: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Resources:
        return cls(
            workers=int(data.get("workers", 1)),
            gpus_per_worker=int(data.get("gpus_per_worker", 0)),
            parameter_servers=int(data.get("parameter_servers", 0)),
            gpu_ids=tuple(int(i) for i in data.get("gpu_ids", ())),
            cpu_slots_per_worker=int(data.get("cpu_slots_per_worker", 1)),
            gpus_physical=bool(data.get("gpus_physical", False)),
            gpu_share_milli=int(data.get("gpu_share_milli", 0)),
            gpu_memory_limit_mb=int(data.get("gpu_memory_limit_mb", 0)),
            gpu_mps=bool(data.get("gpu_mps", False)),
            replicas_target=int(data.get("replicas_target", 0)),
        )


@dataclass(frozen=True)
class TrialSpec:
    trial_id: str
    # A zoo name (catalog.ZOO_MODELS), a diagnostic job ("pi") or the path of a user .py module.
    model: str
    # A built-in name (catalog.BUILTIN_DATASETS) or the path of an uploaded .npz / .csv file.
    dataset: str
    # Survives restarts of the same trial: checkpoints/, best/, export/, attempts/ live here.
    work_dir: str
    # Where built-in datasets that cannot be generated live (cifar-10-batches-py/...).
    datasets_dir: str = ""
    label_column: str = ""  # CSV only
    # A registered sharded dataset (training/data/shards.py ShardedSource.to_dict()); when set,
    # it is what the trial reads and `dataset` is only its name.
    dataset_source: dict[str, Any] = field(default_factory=dict)
    # The node's dataset roots (as configured and resolved): a registered dataset's folders
    # must lie below one, with no link on the way, when they are mounted (dataset_mounts.py).
    dataset_roots: list[str] = field(default_factory=list)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    # The metric that picks the best epoch and, with a value, the target (training/target.py).
    target_metric: str = ""
    target_mode: str = ""
    target_value: float | None = None
    # A workspace session (model "workspace"): its Jupyter token and socket, its owner's API
    # token and the platform's address (training/workspace/session.py); empty for a trial.
    workspace: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrialSpec:
        data = json.loads(text)
        data["resources"] = Resources.from_dict(data.get("resources") or {})
        return cls(**data)


@dataclass(frozen=True)
class TrialEvent:
    kind: str
    payload: dict[str, Any]
    task: str = ""  # "worker:0", "chief:0", "ps:0" or "supervisor"
    time: float = field(default_factory=time.time)
    trial_id: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> TrialEvent:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class TrialOutcome:
    status: OutcomeStatus
    retryable: bool
    exit_reason: str
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    strategy: str = ""
    strategy_reason: str = ""
    replicas: int = 0
    global_batch_size: int = 0
    per_replica_batch_size: int = 0
    learning_rate: float = 0.0
    # Micro-batches per replica and optimizer step: > 1 for an elastic trial below its target.
    accumulation_steps: int = 1
    export_path: str = ""
    best_checkpoint_path: str = ""
    epochs_completed: int = 0
    resumed_from_epoch: int = 0
    final_metrics: dict[str, Any] = field(default_factory=dict)
    time_to_target_seconds: float | None = None
    # The target metric (training/target.py), its best value and the epoch it came from.
    best_metric: str = ""
    best_value: float | None = None
    best_epoch: int = 0
    devices: list[dict[str, Any]] = field(default_factory=list)
    placement: dict[str, Any] = field(default_factory=dict)
    weights_checksums: dict[str, str] = field(default_factory=dict)
    attempt_dir: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> TrialOutcome:
        return cls(**json.loads(text))
