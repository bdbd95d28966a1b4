"""6. Input pipeline: the same data streamed from TFRecord shards against held in memory.

One process trains the same model (the zoo's mlp, as item 1's workload) on the same examples
two ways, each from a fresh model with the same seed, alternating which goes first in each round:
- in memory: the arrays through `datasets.dataset_train` (what an upload or built-in dataset
  gets: cached, shuffled, batched, prefetched);
- streamed: the arrays written as TFRecord shards and registered, read by the trial's own path
  (`registered.registered_pipelines` over `shards.shards_dataset`: files interleaved, parsed,
  shuffled in a bounded buffer, batched per replica).
Each run's first epoch traces the step function and is left out; the ratio is of the medians of
the other epochs' examples per second, so both sides meet the same machine at the same time.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.report import Section, Table, Target, number

SHARDS = 8
TARGET_RATIO = 0.9


def _shards_write(*, root: Path, x: np.ndarray, y: np.ndarray) -> int:
    from training.trial.tfenv import tf

    size = 0
    for index, part in enumerate(np.array_split(np.arange(len(x)), SHARDS)):
        path = root / f"part-{index:05d}.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for row in part:
                writer.write(tf.train.Example(features=tf.train.Features(feature={
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x[row])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[y[row]])),
                })).SerializeToString())
        size += path.stat().st_size
    return size


def _epoch_rates(*, train: Any, data: Any, hparams: dict[str, Any], steps: int, epochs: int
                 ) -> list[float]:
    from training.scaling import batch_plan
    from training.trial.modelling import model_compile
    from training.trial.tfenv import keras
    from training.trial.zoo import ZOO_BUILDERS

    keras.utils.set_random_seed(hparams["seed"])
    model = ZOO_BUILDERS["mlp"](hparams=hparams, data=data)
    batch = batch_plan(batch_size=hparams["batch_size"], replicas=1,
                       learning_rate=hparams["learning_rate"], scale=True, warmup_epochs=0)
    model_compile(model=model, hparams=hparams, batch=batch, steps_per_epoch=steps,
                  exact_evaluation=False)
    marks: list[float] = []
    timer = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda *_: marks.append(time.perf_counter()))
    model.fit(train, epochs=epochs, steps_per_epoch=steps, callbacks=[timer], verbose=0)
    examples = steps * hparams["batch_size"]
    # From the end of the first epoch (which traces the step function) on.
    return [examples / (b - a) for a, b in itertools.pairwise(marks)]


def input_pipeline_measure(*, rounds: int, epochs: int, copies: int) -> Section:
    from training import catalog
    from training.arrays import ArrayData, digits_load
    from training.data.array_pipelines import dataset_train, steps_per_epoch
    from training.data.pipelines import Where
    from training.data.registered import registered_pipelines
    from training.shard_schema import ShardedSource

    started = time.monotonic()
    digits = digits_load()
    # digits repeated (and jittered, so no two rows are equal) to a few epochs' worth of rows.
    rng = np.random.default_rng(0)
    x = np.concatenate([digits.x_train] * copies)
    x = (x + rng.normal(scale=0.01, size=x.shape)).astype(np.float32)
    y = np.concatenate([digits.y_train] * copies)
    data = ArrayData("digits", x, y, digits.x_test, digits.y_test, num_classes=10)
    hparams = catalog.hyperparameters_resolve(model="mlp", values={"hidden_units": 1024})
    global_batch = hparams["batch_size"]
    steps = steps_per_epoch(examples=len(x), global_batch=global_batch)
    rates: dict[str, list[float]] = {"in memory (arrays)": [], "streamed (TFRecord shards)": []}
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as folder:
        root = Path(folder)
        size = _shards_write(root=root, x=x, y=y)
        source = ShardedSource(
            name="digits-shards", format="tfrecord", train=str(root), validation=str(root),
            features={"x": {"dtype": "float32", "shape": [64]}}, label="label",
            label_spec={"dtype": "int64", "shape": []}, train_examples=len(x),
            validation_examples=len(x), num_classes=10, size_bytes=size,
        )
        streamed = registered_pipelines(source=source.to_dict(), hparams=hparams,
                                        global_batch_size=global_batch, where=Where())
        for round_index in range(rounds):
            order = list(rates) if round_index % 2 == 0 else list(reversed(rates))
            for kind in order:
                if kind.startswith("in memory"):
                    train = dataset_train(data=data, batch_size=global_batch, seed=0,
                                          augment=False)
                else:
                    from training.data.pipelines import context_make

                    ctx = context_make(hparams=hparams, input_context=None,
                                       global_batch_size=global_batch, where=Where())
                    train = streamed.build(ctx)["train"].repeat().prefetch(-1)
                rates[kind] += _epoch_rates(train=train, data=data, hparams=hparams,
                                            steps=steps, epochs=epochs)
    medians = {kind: statistics.median(values) for kind, values in rates.items()}
    memory, stream = medians.values()
    ratio = stream / memory
    return Section(
        title="6. Input pipeline",
        description=(
            f"The zoo's mlp (1,024 hidden units) on {len(x):,} digits rows, batch {global_batch}, "
            f"{steps} steps per epoch, {rounds} rounds of {epochs} epochs each way, alternating "
            f"which goes first; the streamed side reads {SHARDS} TFRecord shards "
            f"({size / 2**20:.1f} MiB) through the registered-dataset path."
        ),
        tables=[Table(
            columns=("input", "median examples/s", "min", "max", "epochs measured"),
            rows=[(kind, number(medians[kind], 0), number(min(values), 0),
                   number(max(values), 0), str(len(values)))
                  for kind, values in rates.items()],
        )],
        targets=[Target(name="streamed TFRecord ÷ in-memory arrays (examples/s, medians)",
                        value=round(ratio, 3), comparison=">=", threshold=TARGET_RATIO)],
        seconds=time.monotonic() - started,
    )
