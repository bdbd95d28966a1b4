"""The user-module examples under examples/ train as the README's contract says."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from training.spec import Resources

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

pytestmark = pytest.mark.slow


def _uploaded(*, name: str, tmp_path: Path) -> str:
    """Where an upload lands: a copy beside the trial, not the repository's file."""
    copy = tmp_path / name
    shutil.copyfile(EXAMPLES / name, copy)
    return str(copy)


@pytest.mark.parametrize("gpus", [0, 2], ids=["default", "mirrored"])
def test_the_convnet_example_trains_on_digits_unchanged_across_strategies(
    gpus: int, tmp_path: Path, run_trial: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    spec = make_spec(
        work_dir=tmp_path / "trial",
        model=_uploaded(name="digits_convnet.py", tmp_path=tmp_path),
        resources=Resources(gpus_per_worker=gpus),
        hyperparameters={"epochs": 4, "filters": 8, "learning_rate": 0.01},
    )
    run = run_trial(spec=spec)
    assert run.outcome.status == "completed", run.outcome.exit_reason
    assert run.outcome.strategy == ("MirroredStrategy" if gpus else "default")
    batch = run.phase("batch")[0]
    assert batch["platform_compiled"] is True  # left uncompiled: the platform's rule applies
    assert run.outcome.final_metrics["val_accuracy"] >= 0.85


def test_the_own_dataset_example_keeps_its_data_and_its_compile(
    tmp_path: Path, run_trial: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    spec = make_spec(
        work_dir=tmp_path / "trial",
        model=_uploaded(name="own_dataset.py", tmp_path=tmp_path),
        dataset="ignored",
        hyperparameters={"epochs": 20, "hidden_units": 32, "learning_rate": 0.02},
    )
    run = run_trial(spec=spec)
    assert run.outcome.status == "completed", run.outcome.exit_reason
    batch = run.phase("batch")[0]
    assert batch["platform_compiled"] is False
    assert batch["dataset"] == {**batch["dataset"], "train_examples": 640, "num_classes": 2}
    assert run.outcome.final_metrics["val_accuracy"] >= 0.8


def test_the_example_spec_names_the_example_module() -> None:
    spec = yaml.safe_load((EXAMPLES / "digits.yaml").read_text())
    assert spec["model"] == "upload"
    assert (EXAMPLES / spec["model_file"]).is_file()
