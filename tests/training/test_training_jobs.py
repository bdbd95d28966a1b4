"""The pi diagnostic job and a built-in image model on CIFAR-format files."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from training.spec import Resources

pytestmark = pytest.mark.slow


def test_pi_spreads_over_every_worker_and_device(
    tmp_path: Path, run_trial: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    spec = make_spec(work_dir=tmp_path / "pi", model="pi", dataset="", resources=Resources(
        workers=2), hyperparameters={"pi_samples_per_replica": 200_000, "pi_rounds": 3})
    outcome = run_trial(spec=spec).outcome
    assert outcome.status == "completed", outcome.exit_reason
    metrics = outcome.final_metrics
    assert metrics["samples"] == 200_000 * 3 * 2
    # 1.2M samples: the standard error is about 0.0015, so 0.01 is a six-sigma bound.
    assert abs(metrics["pi"] - math.pi) < 0.01 and metrics["abs_error"] < 0.01
    rates = metrics["samples_per_sec_by_worker"]
    assert set(rates) == {"worker:0", "worker:1"} and all(r > 0 for r in rates.values())
    assert outcome.strategy == "MultiWorkerMirroredStrategy"


def test_cifar10_cnn_trains_on_cifar_files_and_exports_a_uint8_signature(
    tmp_path: Path, run_trial: Callable[..., Any], make_spec: Callable[..., Any],
    write_cifar: Callable[..., Path],
) -> None:
    write_cifar(root=tmp_path / "datasets", per_file=40)
    spec = make_spec(work_dir=tmp_path / "cnn", model="cifar10_cnn", dataset="cifar10",
                     datasets_dir=str(tmp_path / "datasets"),
                     hyperparameters={"epochs": 1, "batch_size": 50})
    outcome = run_trial(spec=spec).outcome
    assert outcome.status == "completed", outcome.exit_reason
    assert outcome.global_batch_size == 50 and outcome.epochs_completed == 1

    from training.arrays import cifar10_load  # noqa: I001 - TF only where a test needs it
    from training.catalog import hyperparameters_resolve
    from training.tfenv import tf
    from training.zoo import cifar10_cnn_build

    data = cifar10_load(datasets_dir=str(tmp_path / "datasets"))
    served = tf.saved_model.load(outcome.export_path).signatures["serving_default"]
    signature = served.structured_input_signature[1]["inputs"]
    assert signature.dtype == tf.uint8 and signature.shape.as_list() == [None, 32, 32, 3]
    probabilities = served(inputs=tf.constant(data.x_test))["probabilities"].numpy()
    model = cifar10_cnn_build(
        hparams=hyperparameters_resolve(model="cifar10_cnn", values={}), data=data
    )
    latest = tf.train.latest_checkpoint(str(tmp_path / "cnn" / "checkpoints"))
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    np.testing.assert_allclose(probabilities, model.predict(data.x_test, verbose=0), atol=1e-6)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
