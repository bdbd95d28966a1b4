"""The pi diagnostic job, a built-in image model on CIFAR-format files, the recurrent model."""

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
    spec = make_spec(
        work_dir=tmp_path / "pi",
        model="pi",
        dataset="",
        resources=Resources(workers=2),
        hyperparameters={"pi_samples_per_replica": 200_000, "pi_rounds": 3},
    )
    outcome = run_trial(spec=spec).outcome
    assert outcome.status == "completed", outcome.exit_reason
    metrics = outcome.final_metrics
    assert metrics["samples"] == 200_000 * 3 * 2
    # 1.2M samples: the standard error is about 0.0015, so 0.01 is a six-sigma bound.
    assert abs(metrics["pi"] - math.pi) < 0.01 and metrics["abs_error"] < 0.01
    rates = metrics["samples_per_sec_by_worker"]
    assert set(rates) == {"worker:0", "worker:1"} and all(r > 0 for r in rates.values())
    assert outcome.strategy == "MultiWorkerMirroredStrategy"


def test_pi_on_one_cpu_worker_runs_under_the_default_strategy(
    tmp_path: Path, run_trial: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    spec = make_spec(
        work_dir=tmp_path / "pi",
        model="pi",
        dataset="",
        hyperparameters={"pi_samples_per_replica": 100_000, "pi_rounds": 2},
    )
    outcome = run_trial(spec=spec).outcome
    assert outcome.status == "completed", outcome.exit_reason
    assert outcome.strategy == "default"
    assert outcome.final_metrics["samples"] == 200_000
    assert outcome.final_metrics["abs_error"] < 0.05


def test_cifar10_cnn_trains_on_cifar_files_and_exports_a_uint8_signature(
    tmp_path: Path,
    run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
    write_cifar: Callable[..., Path],
) -> None:
    write_cifar(root=tmp_path / "datasets", per_file=40)
    spec = make_spec(
        work_dir=tmp_path / "cnn",
        model="cifar10_cnn",
        dataset="cifar10",
        datasets_dir=str(tmp_path / "datasets"),
        hyperparameters={"epochs": 1, "batch_size": 50},
    )
    outcome = run_trial(spec=spec).outcome
    assert outcome.status == "completed", outcome.exit_reason
    assert outcome.global_batch_size == 50 and outcome.epochs_completed == 1

    # TF is imported only by the tests that need it.
    from training.arrays import cifar10_load
    from training.catalog import hyperparameters_resolve
    from training.trial.tfenv import tf
    from training.trial.zoo import cifar10_cnn_build

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



def test_gru_learns_digits_as_pixel_sequences_under_mirrored(
    tmp_path: Path, run_trial: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    spec = make_spec(
        work_dir=tmp_path / "gru",
        model="gru",
        dataset="digits",
        resources=Resources(gpus_per_worker=2),
        hyperparameters={"epochs": 8, "hidden_units": 32},
    )
    outcome = run_trial(spec=spec).outcome
    assert outcome.status == "completed", outcome.exit_reason
    assert outcome.strategy == "MirroredStrategy"
    assert outcome.final_metrics["val_accuracy"] > 0.5  # ten classes: chance is 0.1

    from training.trial.tfenv import tf

    served = tf.saved_model.load(outcome.export_path).signatures["serving_default"]
    signature = served.structured_input_signature[1]["inputs"]
    assert signature.dtype == tf.float32 and signature.shape.as_list() == [None, 64]


OWN_DATA_AND_OPTIMIZER = """
import numpy as np
import tf_keras as keras


def build_dataset(hparams):
    rng = np.random.default_rng(hparams["seed"])
    x = rng.normal(size=(600, 2)).astype("float32")
    y = (x[:, 0] * x[:, 1] > 0).astype("int64")  # which diagonal quadrant pair
    return x[:500], y[:500], x[500:], y[500:]


def build_model(hparams):
    model = keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(hparams["num_classes"], activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model
"""


def test_module_with_its_own_dataset_and_optimizer_is_respected(
    tmp_path: Path, run_trial: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    module = tmp_path / "own.py"
    module.write_text(OWN_DATA_AND_OPTIMIZER)
    spec = make_spec(
        work_dir=tmp_path / "own",
        model=str(module),
        dataset="ignored",
        resources=Resources(gpus_per_worker=2),
        hyperparameters={"epochs": 8, "batch_size": 25},
    )
    run = run_trial(spec=spec)
    outcome = run.outcome
    assert outcome.status == "completed", outcome.exit_reason
    batch = run.phase("batch")[0]
    assert batch["platform_compiled"] is False
    assert "compiled its own optimizer" in batch["rule"]
    assert batch["dataset"]["train_examples"] == 500 and batch["dataset"]["num_classes"] == 2
    # The global batch still follows the replicas; the module's rate is not rescaled.
    assert outcome.global_batch_size == 50 and outcome.learning_rate == pytest.approx(0.05)
    assert outcome.final_metrics["val_accuracy"] >= 0.9
