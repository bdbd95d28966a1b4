"""User mistakes fail fast, are never retried, and say what is wrong."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from training.spec import Resources

WRONG_SHAPE = """
import tf_keras as keras


def build_model(hparams):
    return keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        keras.layers.Dense(5, activation="softmax"),  # digits has 10 classes
    ])
"""
RAISES = """
def build_model(hparams):
    layers = hparams["layer_sizes"]  # a hyperparameter the user forgot to set
    return layers
"""


def test_syntax_error_fails_before_any_process_starts(
    tmp_path: Path, run_trial: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    module = tmp_path / "broken.py"
    module.write_text("import tf_keras as keras\n\ndef build_model(hparams)\n    return None\n")
    run = run_trial(spec=make_spec(work_dir=tmp_path / "trial", model=str(module)))
    assert run.outcome.status == "failed" and run.outcome.retryable is False
    assert "broken.py line 3: SyntaxError" in run.outcome.exit_reason
    assert "def build_model(hparams)" in run.outcome.exit_reason
    assert not (tmp_path / "trial.runs" / "attempts").exists()  # no process was started


@pytest.mark.slow
def test_wrong_output_shape_fails_fast_and_is_not_retryable(
    tmp_path: Path, run_trial: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    module = tmp_path / "five_classes.py"
    module.write_text(WRONG_SHAPE)
    start = time.monotonic()
    run = run_trial(spec=make_spec(work_dir=tmp_path / "trial", model=str(module)))
    assert run.outcome.status == "failed" and run.outcome.retryable is False
    assert "worker:0 user code or data error (exit code 65)" in run.outcome.exit_reason
    assert "wrong output shape" in run.outcome.exit_reason
    assert "10 classes, so its last layer must output (batch, 10)" in run.outcome.exit_reason
    assert not run.payloads("metric")  # failed before the first step, not after an epoch
    assert time.monotonic() - start < 60


@pytest.mark.slow
def test_exception_in_build_model_stops_the_whole_gang(
    tmp_path: Path, run_trial: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    module = tmp_path / "raises.py"
    module.write_text(RAISES)
    spec = make_spec(work_dir=tmp_path / "trial", model=str(module), resources=Resources(workers=2))
    run = run_trial(spec=spec)
    outcome = run.outcome
    assert outcome.status == "failed" and outcome.retryable is False
    assert "build_model failed" in outcome.exit_reason
    assert "KeyError: 'layer_sizes'" in outcome.exit_reason
    assert f'File "{module}", line 3, in build_model' in outcome.exit_reason
    assert set(outcome.exit_codes) == {"worker:0", "worker:1"}
    assert all(code is not None for code in outcome.exit_codes.values())


OUT_OF_MEMORY = """
import tensorflow as tf


def build_model(hparams):
    # What TensorFlow raises when a tensor does not fit the device's memory.
    raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor [%d]" % 2**40)
"""


@pytest.mark.slow
def test_out_of_memory_is_the_users_to_fix_and_never_retried(
    tmp_path: Path, run_trial: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    module = tmp_path / "huge.py"
    module.write_text(OUT_OF_MEMORY)
    run = run_trial(spec=make_spec(work_dir=tmp_path / "trial", model=str(module)))
    assert run.outcome.status == "failed" and run.outcome.retryable is False
    assert "user code or data error (exit code 65)" in run.outcome.exit_reason
    assert "out of memory: the model, batch or data does not fit" in run.outcome.exit_reason
    assert "OOM when allocating tensor" in run.outcome.exit_reason
