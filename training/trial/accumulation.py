"""Gradient accumulation for tf-keras, which has none: how a smaller allocation keeps the batch.

An elastic trial below its target size (training/scaling.py) reads the target's global batches.
Each replica splits its share into `steps` micro-batches in order, so at 2 replicas of a target of
4, micro-batch i of replica r holds what replica r*2+i holds at 4 (MirroredStrategy splits a
global batch in order). Forward and backward passes run one micro-batch at a time (the memory of
one), and the gradients are averaged and applied once: the optimizer counts global batches and
makes the full size's update.

Why the average is the full batch's gradient: under a strategy, tf-keras' compiled loss is the
local mean divided by the replicas in sync (regularization losses too), and the optimizer sums
gradients over replicas. A micro-batch's mean weighted by its share of the replica's batch sums
to that batch's mean. Metrics and the loss metric are updated per micro-batch, weighted by its
size, so they too equal the full size's.
"""

from __future__ import annotations

from typing import Any

from training.errors import UserCodeError
from training.trial.tfenv import keras, tf


def accumulation_apply(*, model: Any, steps: int) -> None:
    """Makes `model.fit` accumulate `steps` micro-batches per optimizer step (none when 1)."""
    if steps <= 1:
        return
    if type(model).train_step is not keras.Model.train_step or "train_step" in vars(model):
        raise UserCodeError(
            "the model defines its own train_step, so an elastic trial below its largest size "
            f"cannot accumulate gradients over {steps} micro-batches to keep the global batch: "
            "use the standard train_step (override compute_loss instead), or a fixed size"
        )

    def train_step(data: Any) -> Any:
        return _accumulated_step(model=model, steps=steps, data=data)

    # make_train_function calls self.train_step, so the instance's attribute wins.
    model.train_step = train_step
    model.train_function = None


def _accumulated_step(*, model: Any, steps: int, data: Any) -> Any:
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    size = tf.shape(tf.nest.flatten(x)[0])[0]
    variables = model.trainable_variables
    optimizer = model.optimizer
    loss_scaled = hasattr(optimizer, "get_scaled_loss")  # mixed precision's LossScaleOptimizer
    total: list[Any] | None = None
    gate: list[Any] = []
    result = None
    for index in range(steps):
        start, end = size * index // steps, size * (index + 1) // steps
        # The next micro-batch waits for this one's gradients: otherwise TF may run the
        # independent forward passes at once, holding all their activations.
        with tf.control_dependencies(gate):
            part_x, part_y, part_weight = (_rows(value, start=start, end=end)
                                           for value in (x, y, sample_weight))
        with tf.GradientTape() as tape:
            y_pred = model(part_x, training=True)
            loss = model.compute_loss(part_x, part_y, y_pred, part_weight)
            model._validate_target_and_loss(part_y, loss)
            share = tf.cast(end - start, loss.dtype) / tf.cast(size, loss.dtype)
            weighted = loss * share
            if loss_scaled:
                weighted = optimizer.get_scaled_loss(weighted)
        gradients = tape.gradient(weighted, variables)
        if loss_scaled:
            gradients = optimizer.get_unscaled_gradients(gradients)
        result = model.compute_metrics(part_x, part_y, y_pred, part_weight)
        total = list(gradients) if total is None else [
            _gradients_add(a, b) for a, b in zip(total, gradients, strict=True)]
        gate = [g.values if isinstance(g, tf.IndexedSlices) else g
                for g in total if g is not None]
    assert total is not None
    # One update per global batch: a LossScaleOptimizer skips it (and lowers its scale) when
    # any micro-batch overflowed, since the sum is then not finite either.
    optimizer.apply_gradients(zip(total, variables, strict=True))
    return result


def _rows(value: Any, *, start: Any, end: Any) -> Any:
    if value is None:
        return None
    return tf.nest.map_structure(lambda t: tf.identity(t[start:end]), value)


def _gradients_add(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, tf.IndexedSlices) and isinstance(b, tf.IndexedSlices):
        # Sparse rows (embeddings) stay sparse: the optimizer sums duplicate indices.
        return tf.IndexedSlices(tf.concat([a.values, b.values], 0),
                                tf.concat([a.indices, b.indices], 0), a.dense_shape)
    return tf.convert_to_tensor(a) + tf.convert_to_tensor(b)
