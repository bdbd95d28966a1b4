"""tf.data input pipelines on the host CPU, distributed by whichever strategy the trial runs.

Arrays come from `arrays.py` exactly as stored (raw pixels, raw features): scaling is part of the
model, so the exported SavedModel accepts the same raw inputs. The training pipeline is endless,
with an explicit `steps_per_epoch`, because parameter-server training cannot infer epoch ends from
an endless remote iterator.

With a seed, the pipeline is exact: epoch e visits a permutation that depends on (seed, e) alone,
each of its examples once, less the remainder of a global batch, in `steps_per_epoch` batches, so
an epoch is one pass. It can start at any (epoch, step): a trial resumed mid-epoch, at whatever
size, trains on exactly the batches it would have trained on uninterrupted. Augmentation stays
random. Without a seed (parameter servers: asynchronous workers must not walk the same order in
lockstep) it is map (parallel) → cache → shuffle → repeat → batch, reshuffled every pass.

Synchronous strategies get a `tf.data.Dataset` of *global* batches: Keras distributes it
(experimental_distribute_dataset), splitting each batch over replicas and sharding by data across
workers. Parameter-server training gets a `DatasetCreator`: each worker builds its own pipeline.
"""

from __future__ import annotations

from typing import Any

from training.arrays import ArrayData
from training.trial.tfenv import keras, tf

AUTOTUNE = tf.data.AUTOTUNE


def _prepare(x: Any, y: Any) -> tuple[Any, Any]:
    # Class ids as int32 for sparse cross-entropy, other targets as stored; inputs keep the
    # stored dtype on purpose.
    return x, (tf.cast(y, tf.int32) if y.dtype.is_integer else y)


def _augment(x: Any, y: Any) -> tuple[Any, Any]:
    # Classic CIFAR augmentation: random horizontal flip and a 4-pixel shifted crop.
    dtype = x.dtype
    image = tf.image.random_flip_left_right(x)
    size = tf.shape(image)
    image = tf.image.resize_with_crop_or_pad(image, size[0] + 8, size[1] + 8)
    image = tf.image.random_crop(image, size)
    return tf.cast(image, dtype), y


def _options() -> Any:
    options = tf.data.Options()
    # In-memory arrays have no files to shard: workers split the stream element-wise instead.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return options


def steps_per_epoch(*, examples: int, global_batch: int) -> int:
    return max(1, examples // global_batch)


def dataset_train(
    *, data: ArrayData, batch_size: int, seed: int | None, augment: bool, start_epoch: int = 0,
    start_step: int = 0,
) -> Any:
    """Global batches from (`start_epoch`, `start_step`) on; see the module's docstring."""
    examples = len(data.x_train)
    used = examples // batch_size * batch_size
    if seed is None or not used:
        # A dataset smaller than one global batch has no whole pass to repeat exactly.
        dataset = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
        dataset = dataset.map(_prepare, num_parallel_calls=AUTOTUNE).cache()
        dataset = dataset.shuffle(examples, seed=seed, reshuffle_each_iteration=True).repeat()
    else:
        x, y = tf.constant(data.x_train), tf.constant(data.y_train)

        def epoch_order(epoch: Any) -> Any:
            # Stateless: the order depends on (seed, epoch) only, not on what ran before.
            order = tf.random.experimental.stateless_shuffle(
                tf.range(examples, dtype=tf.int64),
                seed=tf.stack([tf.constant(seed, tf.int64), epoch]))
            return tf.data.Dataset.from_tensor_slices(order[:used])

        indices = tf.data.Dataset.counter(start_epoch).flat_map(epoch_order)
        dataset = indices.skip(start_step * batch_size).map(
            lambda i: _prepare(tf.gather(x, i), tf.gather(y, i)), num_parallel_calls=AUTOTUNE)
    if augment and len(data.input_shape) == 3:
        dataset = dataset.map(_augment, num_parallel_calls=AUTOTUNE)
    # Fixed batch shapes keep every replica's step identical (no retracing on a short last batch).
    dataset = dataset.batch(batch_size, drop_remainder=True).prefetch(AUTOTUNE)
    return dataset.with_options(_options())


def dataset_eval(*, data: ArrayData, batch_size: int) -> Any:
    dataset = tf.data.Dataset.from_tensor_slices((data.x_test, data.y_test))
    dataset = dataset.map(_prepare, num_parallel_calls=AUTOTUNE).batch(batch_size).cache()
    return dataset.prefetch(AUTOTUNE).with_options(_options())


def dataset_creator_train(*, data: ArrayData, global_batch: int, augment: bool) -> Any:
    """Per-worker pipelines for parameter-server training (each worker calls the function)."""

    def dataset_fn(context: Any) -> Any:
        batch = context.get_per_replica_batch_size(global_batch) if context else global_batch
        # Asynchronous workers must not walk the same order in lockstep, so no fixed seed here.
        return dataset_train(data=data, batch_size=batch, seed=None, augment=augment)

    return keras.utils.experimental.DatasetCreator(dataset_fn)
