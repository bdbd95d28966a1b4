"""Any Keras task: modules that compile their own loss and metrics (several outputs, a custom
train_step), judged by the target metric they name, exported with a signature of their own outputs.
The regression example is trained to its target, deployed and queried through the platform in
tests/tfplatform/modelregistry/test_deploy_regression.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# Two named inputs and two named outputs from a tf.data pipeline: a class and a value per row.
MULTI_OUTPUT_MODULE = '''
import numpy as np
import tensorflow as tf
import tf_keras as keras


def _split(rows, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(rows, 4)).astype("float32")
    b = rng.integers(0, 5, size=(rows, 1)).astype("int64")
    kind = (a[:, 0] > 0).astype("int64")
    value = (a.sum(axis=1) + b[:, 0]).astype("float32")
    return {"a": a, "b": b}, {"kind": kind, "value": value}


def build_dataset(ctx):
    def dataset(rows, seed):
        x, y = _split(rows, seed)
        data = tf.data.Dataset.from_tensor_slices((x, y))
        data = data.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return data.batch(ctx.per_replica_batch_size, drop_remainder=True)
    return {"train": dataset(800, 1), "validation": dataset(160, 2)}


def build_model(hparams):
    a = keras.Input(shape=(4,), name="a")
    b = keras.Input(shape=(1,), name="b", dtype="int64")
    h = keras.layers.Concatenate()([a, keras.layers.Lambda(lambda t: tf.cast(t, "float32"))(b)])
    h = keras.layers.Dense(16, activation="relu")(h)
    model = keras.Model({"a": a, "b": b}, {
        "kind": keras.layers.Dense(2, activation="softmax", name="kind")(h),
        "value": keras.layers.Dense(1, name="value")(h),
    })
    model.compile(optimizer="adam",
                  loss={"kind": "sparse_categorical_crossentropy", "value": "mse"},
                  metrics={"kind": ["accuracy"], "value": ["mae"]})
    return model
'''
# A custom train_step (gradients clipped by global norm) on digits, compiled by the module.
CUSTOM_STEP_MODULE = '''
import tensorflow as tf
import tf_keras as keras


class Clipped(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            predicted = self(x, training=True)
            loss = self.compiled_loss(y, predicted, regularization_losses=self.losses)
        gradients = tape.gradient(loss, self.trainable_variables)
        gradients, _ = tf.clip_by_global_norm(gradients, 1.0)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        self.compiled_metrics.update_state(y, predicted)
        return {m.name: m.result() for m in self.metrics}


def build_model(hparams):
    inputs = keras.Input(shape=hparams["input_shape"])
    hidden = keras.layers.Dense(32, activation="relu")(keras.layers.Rescaling(1 / 16)(inputs))
    outputs = keras.layers.Dense(hparams["num_classes"], activation="softmax")(hidden)
    model = Clipped(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model
'''


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("task_modules")
    paths = {}
    regression = (EXAMPLES / "regression.py").read_text()
    for name, text in (("regression", regression), ("multi_output", MULTI_OUTPUT_MODULE),
                       ("custom_step", CUSTOM_STEP_MODULE)):
        (root / f"{name}.py").write_text(text)
        paths[name] = str(root / f"{name}.py")
    return paths


def _saved_model_call(path: str, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    import tensorflow as tf

    signature = tf.saved_model.load(path).signatures["serving_default"]
    return {k: v.numpy() for k, v in signature(**{k: tf.constant(v)
                                                  for k, v in inputs.items()}).items()}


def test_named_inputs_and_outputs_train_and_export_by_name(
    tmp_path: Path, modules: dict[str, str], run_trial: Callable[..., Any],
    make_spec: Callable[..., Any]
) -> None:
    spec = make_spec(work_dir=tmp_path / "multi", model=modules["multi_output"],
                     target_metric="val_kind_accuracy", hyperparameters={"epochs": 2})
    run = run_trial(spec=spec)
    assert run.outcome.status == "completed", run.outcome.exit_reason
    metrics = run.payloads("metric")[-1]
    assert {"val_kind_accuracy", "val_value_mae", "val_loss"} <= set(metrics)
    export = run.payloads("export")[0]
    assert export["inputs"] == {"a": {"dtype": "float32", "shape": [-1, 4]},
                                "b": {"dtype": "int64", "shape": [-1, 1]}}
    assert export["outputs"] == {"kind": {"dtype": "float32", "shape": [-1, 2]},
                                 "value": {"dtype": "float32", "shape": [-1, 1]}}
    served = _saved_model_call(export["path"], a=np.zeros((2, 4), "float32"),
                               b=np.ones((2, 1), "int64"))
    assert served["kind"].shape == (2, 2) and served["value"].shape == (2, 1)


def test_a_custom_train_step_trains_on_two_replicas(
    tmp_path: Path, modules: dict[str, str], run_trial: Callable[..., Any],
    make_spec: Callable[..., Any]
) -> None:
    from training.spec import Resources

    spec = make_spec(work_dir=tmp_path / "custom", model=modules["custom_step"],
                     resources=Resources(gpus_per_worker=2), hyperparameters={"epochs": 3})
    run = run_trial(spec=spec)
    assert run.outcome.status == "completed", run.outcome.exit_reason
    assert run.outcome.strategy == "MirroredStrategy" and run.outcome.replicas == 2
    assert run.outcome.final_metrics["val_accuracy"] > 0.85
    assert len(set(run.payloads("weights")[0]["replica_checksums"])) == 1
    assert run.payloads("export")[0]["outputs"] == {
        "outputs": {"dtype": "float32", "shape": [-1, 10]}}


def test_a_target_metric_the_model_does_not_report_fails_as_a_user_error(
    tmp_path: Path, modules: dict[str, str], run_trial: Callable[..., Any],
    make_spec: Callable[..., Any]
) -> None:
    spec = make_spec(work_dir=tmp_path / "unknown", model=modules["regression"],
                     target_metric="val_auc", hyperparameters={"epochs": 3})
    run = run_trial(spec=spec)
    assert run.outcome.status == "failed" and not run.outcome.retryable
    assert "the target metric val_auc is not among the metrics this model reports" in (
        run.outcome.exit_reason)
    assert "val_mae" in run.outcome.exit_reason
