"""A module's `build_dataset(ctx)` returning tf.data pipelines over TFRecord shards.

The same module trains under every strategy. Its pipeline prints the ids of the examples of each
batch it reads (tf.print runs inside the input pipeline, on the worker that reads), so the test
sees which worker read which examples: under MultiWorkerMirroredStrategy the two workers read
disjoint shards that together are the whole training split.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from training.arrays import digits_load
from training.spec import Resources

pytestmark = pytest.mark.slow

PIPELINE_MODULE = '''
import sys

import tensorflow as tf
import tf_keras as keras

FEATURES = {
    "x": tf.io.FixedLenFeature([64], tf.float32),
    "label": tf.io.FixedLenFeature([], tf.int64),
    "id": tf.io.FixedLenFeature([], tf.int64),
}


def _parse(records):
    parsed = tf.io.parse_example(records, FEATURES)
    return parsed


def build_dataset(ctx):
    root = ctx.datasets_dir + "/digits-tfrecord"

    def split(pattern, train):
        files = ctx.shard_files(f"{root}/{pattern}")
        dataset = tf.data.TFRecordDataset(files)
        if train:
            dataset = dataset.shuffle(2048, seed=ctx["seed"])
        dataset = dataset.batch(ctx.per_replica_batch_size, drop_remainder=True).map(_parse)
        if train:
            def seen(batch):
                tf.print("seen", batch["id"], summarize=-1, output_stream=sys.stdout)
                return batch
            dataset = dataset.map(seen)
        return dataset.map(lambda b: (b["x"], b["label"]))

    return {"train": split("train-*.tfrecord", True),
            "validation": split("validation-*.tfrecord", False),
            "train_examples": ctx["train_examples"], "validation_examples": ctx["test_examples"]}


def build_model(hparams):
    return keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        keras.layers.Rescaling(1.0 / 16),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
'''
CASES = {
    "default": Resources(),
    "mirrored": Resources(gpus_per_worker=2),
    "multi_worker": Resources(workers=2),
    "parameter_server": Resources(workers=2, parameter_servers=1),
}
TRAIN_SHARDS = 4


def _records_write(*, path: Path, x: np.ndarray, y: np.ndarray, ids: np.ndarray) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for row, label, identity in zip(x, y, ids, strict=True):
            example = tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=row.tolist())),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
                "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(identity)])),
            }))
            writer.write(example.SerializeToString())


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """digits as TFRecord shards under a datasets dir: 4 training shards, 2 validation shards."""
    datasets_dir = tmp_path_factory.mktemp("datasets")
    root = datasets_dir / "digits-tfrecord"
    root.mkdir()
    data = digits_load()
    train_ids = np.arange(len(data.x_train))
    for index, part in enumerate(np.array_split(train_ids, TRAIN_SHARDS)):
        _records_write(path=root / f"train-{index:05d}.tfrecord", x=data.x_train[part],
                       y=data.y_train[part], ids=part)
    test_ids = np.arange(len(data.x_test))
    for index, part in enumerate(np.array_split(test_ids, 2)):
        _records_write(path=root / f"validation-{index:05d}.tfrecord", x=data.x_test[part],
                       y=data.y_test[part], ids=part + 100_000)
    return datasets_dir, {"train_examples": len(data.x_train), "test_examples": len(data.x_test)}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, shards: tuple[Path, dict[str, int]],
            run_trial: Callable[..., Any], make_spec: Callable[..., Any]
            ) -> Callable[[str], Any]:
    module = tmp_path_factory.mktemp("modules") / "digits_pipeline.py"
    module.write_text(PIPELINE_MODULE)
    datasets_dir, counts = shards
    runs: dict[str, Any] = {}

    def get(case: str) -> Any:
        if case not in runs:
            spec = make_spec(
                work_dir=tmp_path_factory.mktemp(case), model=str(module),
                datasets_dir=str(datasets_dir), resources=CASES[case],
                hyperparameters={"epochs": 2, **counts},
            )
            runs[case] = run_trial(spec=spec)
        return runs[case]

    return get


def _seen(run: Any) -> dict[str, set[int]]:
    by_task: dict[str, set[int]] = {}
    for event in run.events:
        message = event.payload.get("message", "") if event.kind == "log" else ""
        if message.startswith("seen ["):
            ids = {int(v) for v in re.findall(r"-?\d+", message)}
            by_task.setdefault(event.task, set()).update(ids)
    return by_task


@pytest.mark.parametrize("case", list(CASES))
def test_pipeline_module_trains_under_every_strategy(case: str,
                                                     trained: Callable[[str], Any]) -> None:
    run = trained(case)
    assert run.outcome.status == "completed", run.outcome.exit_reason
    batch = run.phase("batch")[0]
    assert batch["dataset"]["kind"] == "pipeline"
    assert batch["dataset"]["inputs"] == {"inputs": {"dtype": "float32", "shape": [64]}}
    assert batch["steps_per_epoch"] == 1347 // batch["global_batch_size"]
    assert run.outcome.final_metrics["val_accuracy"] > 0.8
    # The classifier's export takes the raw rows the pipeline yields.
    export = run.payloads("export")[0]
    assert export["inputs"] == {"inputs": {"dtype": "float32", "shape": [-1, 64]}}
    assert set(export["outputs"]) == {"probabilities", "class_id"}


def test_multi_worker_reads_disjoint_shards_that_cover_the_split(
    trained: Callable[[str], Any], shards: tuple[Path, dict[str, int]]
) -> None:
    run = trained("multi_worker")
    assert run.outcome.status == "completed", run.outcome.exit_reason
    seen = _seen(run)
    assert sorted(seen) == ["worker:0", "worker:1"]
    first, second = seen["worker:0"], seen["worker:1"]
    assert not first & second
    assert first | second == set(range(shards[1]["train_examples"]))
    # By file: each worker's ids are whole shards (0 and 2, or 1 and 3).
    parts = [set(p.tolist()) for p in np.array_split(np.arange(1347), TRAIN_SHARDS)]
    assert first == parts[0] | parts[2]


def test_single_worker_reads_every_shard(trained: Callable[[str], Any]) -> None:
    seen = _seen(trained("mirrored"))
    assert list(seen) == ["worker:0"]
    assert seen["worker:0"] == set(range(1347))
