"""A registered dataset larger than the trial's memory trains: it is streamed, never held whole.

The trial (its supervisor and tasks) runs in a memory cgroup the test makes, limited to 1 GiB,
on 1.5 GiB of TFRecord shards. Loading the data whole could not fit; streaming keeps the
trial's memory at the pipeline's bounded buffers, and the cgroup's peak proves it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from training.shard_schema import ShardedSource
from training.spec import TrialOutcome

pytestmark = pytest.mark.slow

MEMORY = Path("/sys/fs/cgroup/memory")
LIMIT_BYTES = 2**30
EXAMPLE_BYTES = 256 * 2**10
EXAMPLES = 6144  # 1.5 GiB
SHARDS = 6
MODULE = '''
import tensorflow as tf
import tf_keras as keras


def build_model(hparams):
    # Each example is 256 KiB of raw bytes; the model decodes them itself.
    raw = keras.Input(shape=(), dtype=tf.string, name="inputs")
    brightness = keras.layers.Lambda(lambda s: tf.reduce_mean(
        tf.cast(tf.io.decode_raw(s, tf.uint8), tf.float32), axis=-1, keepdims=True) / 255.0)(raw)
    return keras.Model(raw, keras.layers.Dense(hparams["num_classes"], activation="softmax")(
        keras.layers.Dense(4, activation="relu")(brightness)))
'''
RUNNER = """
import json, sys
from training.spec import TrialSpec
from training.supervisor.supervise import trial_supervise
spec = TrialSpec.from_json(sys.stdin.read())
outcome = trial_supervise(spec=spec, on_events=lambda events: None, should_cancel=lambda: False)
print(outcome.to_json())
"""


@pytest.fixture
def memory_cgroup(tmp_path: Path) -> Iterator[Path]:
    if not os.access(MEMORY, os.W_OK):
        pytest.skip("needs a writable cgroup v1 memory hierarchy (root on this machine)")
    group = MEMORY / f"tfplatform-test-{tmp_path.name[-20:]}"
    group.mkdir()
    (group / "memory.limit_in_bytes").write_text(str(LIMIT_BYTES))
    yield group
    for pid in (group / "cgroup.procs").read_text().split():
        with open(MEMORY / "cgroup.procs", "w") as parent:
            parent.write(pid)
    group.rmdir()


def _shards_write(*, folder: Path, examples: int) -> int:
    import tensorflow as tf

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for shard, rows in enumerate(np.array_split(np.arange(examples), SHARDS)):
        with tf.io.TFRecordWriter(str(folder / f"part-{shard:05d}.tfrecord")) as writer:
            for row in rows:
                label = int(row % 2)
                # Class 1's bytes are brighter: learnable from a mean, in one epoch.
                pixels = rng.integers(0, 128, EXAMPLE_BYTES, dtype=np.uint8) + 100 * label
                writer.write(tf.train.Example(features=tf.train.Features(feature={
                    "x": tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[pixels.astype(np.uint8).tobytes()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                })).SerializeToString())
    return sum(p.stat().st_size for p in folder.iterdir())


def test_a_dataset_larger_than_the_trials_memory_trains_streamed(
    tmp_path: Path, memory_cgroup: Path, make_spec: object
) -> None:
    train_bytes = _shards_write(folder=tmp_path / "data" / "train", examples=EXAMPLES)
    validation_bytes = _shards_write(folder=tmp_path / "data" / "validation", examples=SHARDS * 16)
    assert train_bytes > 1.4 * 2**30
    source = ShardedSource(
        name="big", format="tfrecord", train=str(tmp_path / "data" / "train"),
        validation=str(tmp_path / "data" / "validation"),
        features={"x": {"dtype": "string", "shape": []}}, label="label",
        label_spec={"dtype": "int64", "shape": []}, train_examples=EXAMPLES,
        validation_examples=SHARDS * 16, num_classes=2,
        size_bytes=train_bytes + validation_bytes,
    )
    module = tmp_path / "bytes_model.py"
    module.write_text(MODULE)
    spec = make_spec(  # type: ignore[operator]
        work_dir=tmp_path / "work", model=str(module), dataset="big",
        dataset_source=source.to_dict(), dataset_roots=[str(tmp_path / "data")],
        hyperparameters={"epochs": 1, "batch_size": 32, "learning_rate": 0.05},
    )
    # Only the trial's own processes in the cgroup: the child joins it before it execs Python.
    procs = str(memory_cgroup / "cgroup.procs")

    def join() -> None:
        with open(procs, "w") as handle:
            handle.write(str(os.getpid()))

    done = subprocess.run(
        [sys.executable, "-c", RUNNER], input=spec.to_json(), capture_output=True, text=True,
        cwd=ROOT, preexec_fn=join, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = TrialOutcome.from_json(done.stdout.strip().splitlines()[-1])
    assert outcome.status == "completed", outcome.exit_reason
    assert outcome.epochs_completed == 1
    peak = int((memory_cgroup / "memory.max_usage_in_bytes").read_text())
    assert outcome.final_metrics["val_accuracy"] > 0.9
    assert peak <= LIMIT_BYTES < train_bytes
    # The kernel never had to kill anything to keep the trial under its limit.
    assert "oom_kill 0" in (memory_cgroup / "memory.oom_control").read_text()
