"""Fixtures for the training engine: real trial processes, real TensorFlow, tiny models."""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from training.spec import Resources, TrialEvent, TrialOutcome, TrialSpec
from training.supervisor.supervise import trial_supervise

# The one user module every strategy trains: it never mentions devices or strategies.
DIGITS_MODULE = """
import tf_keras as keras


def build_model(hparams):
    return keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        keras.layers.Rescaling(1.0 / 16),
        keras.layers.Dense(hparams.get("hidden", 32), activation="relu"),
        keras.layers.Dense(hparams["num_classes"], activation="softmax"),
    ])
"""
DIGITS_HPARAMS: dict[str, Any] = {
    "epochs": 4,
    "batch_size": 32,
    "learning_rate": 0.01,
    "throughput_interval_seconds": 1.0,
}


@dataclass
class TrialRun:
    outcome: TrialOutcome
    events: list[TrialEvent] = field(default_factory=list)
    seconds: float = 0.0

    def payloads(self, kind: str, *, task: str | None = None) -> list[dict[str, Any]]:
        return [e.payload for e in self.events if e.kind == kind and task in (None, e.task)]

    def phase(self, phase: str, *, task: str | None = None) -> list[dict[str, Any]]:
        return [p for p in self.payloads("status", task=task) if p.get("phase") == phase]

    def host_pids(self) -> dict[str, int]:
        """Each task's host as the node sees it (inside its sandbox a task is pid 1)."""
        return host_pids(self.events)


def host_pids(events: list[TrialEvent]) -> dict[str, int]:
    return {
        task["task"]: task["host"]
        for event in events if event.payload.get("phase") == "launched"
        for task in event.payload["tasks"]
    }


@pytest.fixture(scope="session")
def digits_module(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("modules") / "digits_mlp.py"
    path.write_text(DIGITS_MODULE)
    return str(path)


def trial_run(
    *,
    spec: TrialSpec,
    grace_seconds: float = 20.0,
    on_event: Callable[[TrialEvent], None] | None = None,
    should_cancel: Callable[[], bool] = lambda: False,
    cancel_check_seconds: float = 1.0,
) -> TrialRun:
    run = TrialRun(outcome=TrialOutcome(status="failed", retryable=False, exit_reason=""))
    start = time.monotonic()

    def collect(events: list[TrialEvent]) -> None:
        run.events += events
        if on_event is not None:
            for event in events:
                on_event(event)

    run.outcome = trial_supervise(
        spec=spec, on_events=collect, should_cancel=should_cancel, grace_seconds=grace_seconds,
        cancel_check_seconds=cancel_check_seconds,
    )
    run.seconds = time.monotonic() - start
    return run


def spec_make(
    *,
    work_dir: Path,
    model: str,
    dataset: str = "digits",
    resources: Resources | None = None,
    **overrides: Any,
) -> TrialSpec:
    hparams = {**DIGITS_HPARAMS, **overrides.pop("hyperparameters", {})}
    return TrialSpec(
        trial_id=work_dir.name,
        model=model,
        dataset=dataset,
        work_dir=str(work_dir),
        hyperparameters=hparams,
        resources=resources or Resources(),
        **overrides,
    )


def cifar_batches_write(*, root: Path, per_file: int, seed: int = 0) -> Path:
    """CIFAR-10 "python version" files in the official layout and pickle format, but tiny."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        batch = {
            b"batch_label": name.encode(),
            b"labels": [int(v) for v in rng.integers(0, 10, per_file)],
            b"data": rng.integers(0, 256, (per_file, 3072), dtype=np.uint8),
            b"filenames": [f"{name}_{i}.png".encode() for i in range(per_file)],
        }
        with (folder / name).open("wb") as handle:
            pickle.dump(batch, handle, protocol=2)
    return folder


def team_dataset_write(root: Path) -> Any:
    """A registered dataset's folders (parquet shards) at <root>/team: its ShardedSource."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from training.shard_schema import ShardedSource

    for split in ("train", "validation"):
        (root / "team" / split).mkdir(parents=True)
        for index in range(2):
            pq.write_table(pa.table({"x": np.arange(32, dtype=np.float32),
                                     "label": np.arange(32) % 2}),
                           root / "team" / split / f"part-{index}.parquet")
    return ShardedSource(
        name="team-data", format="parquet", train=str(root / "team" / "train"),
        validation=str(root / "team" / "validation"),
        features={"x": {"dtype": "float32", "shape": []}}, label="label",
        label_spec={"dtype": "int64", "shape": []}, train_examples=64, validation_examples=64,
        num_classes=2, size_bytes=1, pack=True)


# Helpers as fixtures: test modules here cannot import this conftest by name (tests/ has another).
@pytest.fixture(scope="session")
def run_trial() -> Callable[..., TrialRun]:
    return trial_run


@pytest.fixture(scope="session")
def make_spec() -> Callable[..., TrialSpec]:
    return spec_make


@pytest.fixture(scope="session")
def write_team_dataset() -> Callable[[Path], Any]:
    return team_dataset_write


@pytest.fixture(scope="session")
def write_cifar() -> Callable[..., Path]:
    return cifar_batches_write
