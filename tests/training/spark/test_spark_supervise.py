"""The Spark backend's node side against a real Spark (pyspark, local[2]): a trial's gang as a
barrier stage, Spark's retry of a killed task resuming from the checkpoint, cancel, and a user's
error not retried."""

import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.paced_model import PACED_MODULE
from training.spark.supervise import spark_trial_supervise
from training.spark.target import SparkTarget
from training.spec import Resources, TrialEvent, TrialOutcome, TrialSpec

pytestmark = pytest.mark.slow

TARGET = SparkTarget(name="test", master="local[2]", conf={"spark.driver.memory": "512m"})


class Recorder:
    def __init__(self) -> None:
        self.events: list[TrialEvent] = []
        self.lock = threading.Lock()

    def __call__(self, events: list[TrialEvent]) -> None:
        with self.lock:
            self.events += events

    def of(self, *, task: str, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e.payload for e in self.events if e.task == task and e.kind == kind]


def _spec(*, tmp_path: Path, model: str, epochs: int) -> TrialSpec:
    work = tmp_path / "work"
    work.mkdir()
    return TrialSpec(trial_id="41", model=model, dataset="digits", work_dir=str(work),
                     hyperparameters={"epochs": epochs, "batch_size": 32,
                                      "learning_rate": 0.01},
                     resources=Resources(workers=2))


def _supervise(*, spec: TrialSpec, recorder: Recorder, tmp_path: Path,
               should_cancel: Any = lambda: False) -> TrialOutcome:
    return spark_trial_supervise(spec=spec, target=TARGET, on_events=recorder,
                                 should_cancel=should_cancel, run_dir=str(tmp_path / "runs"),
                                 grace_seconds=10)


def test_a_killed_task_fails_the_stage_and_spark_resumes_the_gang_from_its_checkpoint(
    tmp_path: Path
) -> None:
    module = tmp_path / "paced.py"
    module.write_text(PACED_MODULE)
    spec = _spec(tmp_path=tmp_path, model=str(module), epochs=5)
    recorder = Recorder()
    killed: list[int] = []

    def kill_worker_1_after_a_checkpoint(events: list[TrialEvent]) -> None:
        recorder(events)
        checkpoints = recorder.of(task="worker:0", kind="checkpoint")
        started = recorder.of(task="worker:1", kind="status")
        pids = [s["pid"] for s in started if s.get("phase") == "started"]
        if not killed and checkpoints and checkpoints[-1]["epoch"] >= 2 and pids:
            killed.append(pids[-1])
            os.kill(pids[-1], signal.SIGKILL)  # mid-epoch 3, as a lost executor would

    outcome = spark_trial_supervise(
        spec=spec, target=TARGET, on_events=kill_worker_1_after_a_checkpoint,
        should_cancel=lambda: False, run_dir=str(tmp_path / "runs"), grace_seconds=10)
    assert killed, "the test never killed a task"
    assert outcome.status == "completed", outcome.exit_reason
    # A resumed chief first replays the history it restored (marked so); the rest is new.
    epochs = [m["epoch"] for m in recorder.of(task="worker:0", kind="metric")
              if not m.get("replayed")]
    assert epochs == [1, 2, 3, 4, 5], epochs  # no epoch repeated, none skipped
    resumed = [s for s in recorder.of(task="worker:0", kind="status")
               if s.get("phase") == "resumed"]
    assert resumed and resumed[-1]["from_epoch"] >= 2, resumed
    assert outcome.resumed_from_epoch >= 2
    exits = [e for e in recorder.of(task="supervisor", kind="log") if "exited" in e["message"]]
    assert any(e["exit_code"] == -signal.SIGKILL for e in exits), exits
    # The stage ran again after the kill: Spark's retry, not the platform's (under load a gang
    # may also lose an attempt to a collective's timeout, which Spark retries as well).
    attempts = {e["message"].rsplit(" ", 1)[-1] for e in exits}
    assert len(attempts) >= 2, exits


def test_cancel_stops_the_spark_job_and_its_trial_processes(tmp_path: Path) -> None:
    module = tmp_path / "paced.py"
    module.write_text(PACED_MODULE)
    spec = _spec(tmp_path=tmp_path, model=str(module), epochs=50)
    recorder = Recorder()
    outcome = _supervise(spec=spec, recorder=recorder, tmp_path=tmp_path,
                         should_cancel=lambda: bool(recorder.of(task="worker:0",
                                                                kind="metric")))
    assert outcome.status == "canceled", outcome.exit_reason
    pids = [s["pid"] for task in ("worker:0", "worker:1")
            for s in recorder.of(task=task, kind="status") if s.get("phase") == "started"]
    assert len(pids) == 2
    # Spark killed their tasks: each trial process checkpoints on its SIGTERM and ends.
    deadline = time.monotonic() + 60
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


# Only worker 1 fails: worker 0 would wait for it in its collectives for ever.
BROKEN_MODULE = """
import os

import tf_keras as keras


def build_model(hparams):
    if os.environ["PLATFORM_TASK"] == "worker:1":
        raise ValueError("the user's own mistake")
    return keras.Sequential([keras.Input(shape=hparams["input_shape"]),
                             keras.layers.Dense(hparams["num_classes"], activation="softmax")])
"""


def test_one_workers_own_error_stops_the_gang_once_without_spark_retrying_it(
    tmp_path: Path
) -> None:
    module = tmp_path / "broken.py"
    module.write_text(BROKEN_MODULE)
    recorder = Recorder()
    outcome = _supervise(spec=_spec(tmp_path=tmp_path, model=str(module), epochs=2),
                         recorder=recorder, tmp_path=tmp_path)
    assert outcome.status == "failed" and not outcome.retryable
    assert "the user's own mistake" in outcome.exit_reason
    exits = [e for e in recorder.of(task="supervisor", kind="log") if "exited" in e["message"]]
    assert {e["message"].rsplit(" ", 1)[-1] for e in exits} == {"1)"}, exits


def test_a_cluster_without_slots_for_the_gang_says_so_then_fails_with_sparks_reason(
    tmp_path: Path
) -> None:
    recorder = Recorder()
    one_slot = SparkTarget(name="small", master="local[1]", conf={
        "spark.driver.memory": "512m",
        "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "2"})
    outcome = spark_trial_supervise(
        spec=_spec(tmp_path=tmp_path, model="mlp", epochs=1), target=one_slot,
        on_events=recorder, should_cancel=lambda: False, run_dir=str(tmp_path / "runs"))
    waiting = [s["reason"] for s in recorder.of(task="supervisor", kind="status")
               if s.get("phase") == "waiting"]
    assert any(reason.startswith(
        "Waiting for the Spark cluster: the gang's 2 tasks need 2 free task slots at once")
        for reason in waiting), waiting
    assert outcome.status == "failed" and not outcome.retryable
    assert "slots" in outcome.exit_reason, outcome.exit_reason


SPARK_INPUT_MODULE = """
import json

import numpy as np
import tensorflow as tf
import tf_keras as keras


def build_model(hparams):
    return keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(2, activation="softmax")])


def build_dataset(ctx):
    columns = ctx.spark_partition()
    with open(f"ids-{ctx.input_pipeline_id}.json", "w") as out:
        json.dump(sorted(int(i) for i in columns["id"]), out)
    x = np.stack([columns[f"x{i}"] for i in range(4)], axis=1).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, columns["label"].astype("int64")))
    total = sum(ctx.spark_partition_sizes())
    batched = data.batch(ctx.per_replica_batch_size)
    return {"train": batched, "validation": batched, "train_examples": total,
            "validation_examples": total, "num_classes": 2}
"""


def test_a_spark_query_is_read_through_one_partition_per_worker_without_files(
    tmp_path: Path
) -> None:
    import json

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    table = tmp_path / "examples"
    table.mkdir()
    for part in range(3):  # three files: Spark's partitions are not the workers' until split
        x = rng.normal(size=(100, 4)).astype("float32")
        pq.write_table(pa.table({"id": np.arange(part * 100, part * 100 + 100),
                                 **{f"x{i}": x[:, i] for i in range(4)},
                                 "label": (x[:, 0] > 0).astype("int64")}),
                       table / f"part-{part}.parquet")
    module = tmp_path / "spark_input.py"
    module.write_text(SPARK_INPUT_MODULE)
    spec = _spec(tmp_path=tmp_path, model=str(module), epochs=2)
    query = "SELECT id, x0, x1, x2, x3, label FROM parquet.`{}` WHERE id < 290"
    spec.hyperparameters["spark_query"] = query.format(table)
    recorder = Recorder()
    outcome = _supervise(spec=spec, recorder=recorder, tmp_path=tmp_path)
    assert outcome.status == "completed", outcome.exit_reason
    work = Path(spec.work_dir)
    seen = [set(json.loads((work / f"ids-{worker}.json").read_text())) for worker in (0, 1)]
    assert seen[0] and seen[1] and not seen[0] & seen[1]
    assert seen[0] | seen[1] == set(range(290))


GPU_MODULE = """
import os

import tf_keras as keras


def build_model(hparams):
    with open(f"gpus-{os.environ['PLATFORM_TASK'].replace(':', '-')}.txt", "w") as out:
        out.write(os.environ["CUDA_VISIBLE_DEVICES"])
    return keras.Sequential([keras.Input(shape=hparams["input_shape"]),
                             keras.layers.Dense(hparams["num_classes"], activation="softmax")])
"""


def test_on_a_local_cluster_each_task_sees_the_gpus_sparks_scheduling_gave_it(
    tmp_path: Path
) -> None:
    # A standalone worker and its executor as separate JVMs (local-cluster), with two GPUs
    # its discovery script reports: this machine has none, so the trial emulates them.
    discovery = tmp_path / "gpus.sh"
    discovery.write_text('#!/bin/sh\necho \'{"name": "gpu", "addresses": ["0", "1"]}\'\n')
    discovery.chmod(0o755)
    cluster = SparkTarget(name="gpus", master="local-cluster[1,2,1024]", conf={
        "spark.worker.resource.gpu.amount": "2",
        "spark.worker.resource.gpu.discoveryScript": str(discovery),
        "spark.executor.resource.gpu.amount": "2", "spark.executor.memory": "512m"})
    module = tmp_path / "gpus.py"
    module.write_text(GPU_MODULE)
    spec = _spec(tmp_path=tmp_path, model=str(module), epochs=1)
    spec = replace(spec, resources=Resources(workers=2, gpus_per_worker=1))
    recorder = Recorder()
    outcome = spark_trial_supervise(spec=spec, target=cluster, on_events=recorder,
                                    should_cancel=lambda: False, run_dir=str(tmp_path / "runs"))
    assert outcome.status == "completed", outcome.exit_reason
    work = Path(spec.work_dir)
    seen = {(work / f"gpus-worker-{i}.txt").read_text() for i in (0, 1)}
    assert seen == {"0", "1"}  # one GPU each, never the same one


def test_parameter_servers_are_tasks_of_the_stage_and_the_job_ends_with_the_chief(
    tmp_path: Path
) -> None:
    # chief, worker and parameter server: three barrier tasks; the server serves until the
    # supervisor ends the job once the chief is done, as a worker node stops its gang.
    three = replace(TARGET, master="local[3]")
    spec = replace(_spec(tmp_path=tmp_path, model="mlp", epochs=2),
                   resources=Resources(workers=1, parameter_servers=1))
    recorder = Recorder()
    outcome = spark_trial_supervise(spec=spec, target=three, on_events=recorder,
                                    should_cancel=lambda: False, run_dir=str(tmp_path / "runs"))
    assert outcome.status == "completed", outcome.exit_reason
    assert outcome.strategy == "ParameterServerStrategy"
    assert outcome.exit_codes["chief:0"] == 0 and outcome.epochs_completed == 2
    started = {e.task for e in recorder.events
               if e.kind == "status" and e.payload.get("phase") == "started"}
    assert started == {"chief:0", "worker:0", "ps:0"}


def test_a_master_that_cannot_be_reached_fails_the_trial_with_sparks_reason(
    tmp_path: Path
) -> None:
    import socket

    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    recorder = Recorder()
    outcome = spark_trial_supervise(
        spec=_spec(tmp_path=tmp_path, model="mlp", epochs=1),
        target=replace(TARGET, master=f"spark://127.0.0.1:{port}"), on_events=recorder,
        should_cancel=lambda: False, run_dir=str(tmp_path / "runs"))
    assert outcome.status == "failed" and not outcome.retryable
    assert "All masters are unresponsive" in outcome.exit_reason, outcome.exit_reason
    assert ".java:" not in outcome.exit_reason, outcome.exit_reason
    waiting = [s for s in recorder.of(task="supervisor", kind="status")
               if s.get("phase") == "waiting"]
    assert waiting, "the wait for executors was never shown"
