"""Gradient accumulation: fewer replicas taking several micro-batches each make the full size's
updates. The strategies run in a subprocess, as logical CPU devices must be configured before
anything in the process touches TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from training.errors import UserCodeError

ROOT = Path(__file__).resolve().parents[3]
# Measured: weights within 5e-7 (relative) and losses within 1e-7 after 5 steps; the sums
# merely run in another order.
RTOL, ATOL = 1e-5, 1e-6

SIZES = """
import json
import sys

import numpy as np

from training.trial.devices import logical_cpus_configure
from training.trial.tfenv import keras, tf

logical_cpus_configure(count=4)

from training.trial.accumulation import accumulation_apply

STEPS, GLOBAL = 5, 16


def train(*, replicas, steps, loss_scale):
    devices = [f"/device:CPU:{i}" for i in range(replicas)]
    strategy = (tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
        if replicas > 1 else tf.distribute.get_strategy())
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * GLOBAL, 6)).astype(np.float32)
    y = rng.integers(0, 3, STEPS * GLOBAL)
    weight = rng.uniform(0.5, 1.5, STEPS * GLOBAL).astype(np.float32)
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((6,)),
            keras.layers.Dense(8, activation="tanh",
                               kernel_regularizer=keras.regularizers.L2(1e-2)),
            keras.layers.Dense(3),
        ])
        optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
        if loss_scale:
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
        model.compile(optimizer=optimizer,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
        model.set_weights([rng.normal(size=v.shape).astype(np.float32) * 0.5
                           for v in model.weights])
        accumulation_apply(model=model, steps=steps)
    data = tf.data.Dataset.from_tensor_slices((x, y, weight)).batch(GLOBAL).repeat()
    # One step an epoch: the history is the loss of every step.
    history = model.fit(data, epochs=STEPS, steps_per_epoch=1, verbose=0).history
    return {"loss": history["loss"], "accuracy": history["accuracy"],
            "weights": [v.tolist() for v in model.get_weights()],
            "iterations": int(model.optimizer.iterations.numpy())}


runs = {f"{r}x{k}{'-scaled' if scaled else ''}": train(replicas=r, steps=k, loss_scale=scaled)
        for scaled in (False, True) for r, k in ((4, 1), (2, 2), (1, 4))}
json.dump(runs, sys.stdout)
"""


@pytest.fixture(scope="module")
def sizes() -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-c", SIZES], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    runs: dict[str, Any] = json.loads(result.stdout)
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("loss_scale", ["", "-scaled"], ids=["plain", "loss_scale"])
@pytest.mark.parametrize("size", ["2x2", "1x4"])
def test_fewer_replicas_accumulating_make_the_full_size_s_updates(
    sizes: dict[str, Any], size: str, loss_scale: str
) -> None:
    """Same seed, same global batches of 16 (sample weights, an L2 penalty): 4 replicas, 2
    replicas × 2 micro-batches and 1 × 4 agree step for step, under a LossScaleOptimizer too
    (each micro loss scaled, the gradients unscaled)."""
    full, small = sizes[f"4x1{loss_scale}"], sizes[f"{size}{loss_scale}"]
    assert full["iterations"] == small["iterations"] == 5  # one update per global batch
    np.testing.assert_allclose(small["loss"], full["loss"], rtol=RTOL, atol=ATOL)
    assert small["accuracy"] == full["accuracy"]
    for mine, theirs in zip(small["weights"], full["weights"], strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=RTOL, atol=ATOL)


def _seen_model() -> Any:
    from training.trial.tfenv import keras, tf

    class BatchSeen(keras.layers.Layer):
        """Remembers the largest batch one forward pass took."""

        def build(self, input_shape: Any) -> None:
            self.seen = self.add_weight(name="seen", shape=(), initializer="zeros",
                                        trainable=False, dtype=tf.int32)

        def call(self, inputs: Any) -> Any:
            self.seen.assign(tf.maximum(self.seen, tf.shape(inputs)[0]))
            return inputs

    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(BatchSeen()(inputs)))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def test_a_forward_pass_takes_one_micro_batch_and_the_optimizer_steps_once() -> None:
    from training.trial.accumulation import accumulation_apply

    model = _seen_model()
    accumulation_apply(model=model, steps=4)
    model.fit(np.ones((32, 3), np.float32), np.zeros((32, 2), np.float32), batch_size=16,
              epochs=1, shuffle=False, verbose=0)
    assert int(model.layers[1].seen.numpy()) == 4
    assert int(model.optimizer.iterations.numpy()) == 2


def test_one_step_leaves_the_model_alone_and_its_own_train_step_is_refused() -> None:
    from training.trial.accumulation import accumulation_apply
    from training.trial.tfenv import keras

    model = _seen_model()
    accumulation_apply(model=model, steps=1)
    assert "train_step" not in vars(model)

    class Custom(keras.Model):
        def train_step(self, data: Any) -> Any:
            return super().train_step(data)

    inputs = keras.Input((3,))
    custom = Custom(inputs, keras.layers.Dense(2)(inputs))
    custom.compile(optimizer="sgd", loss="mse")
    with pytest.raises(UserCodeError, match="defines its own train_step"):
        accumulation_apply(model=custom, steps=2)
