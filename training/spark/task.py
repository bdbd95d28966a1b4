"""One barrier task of a trial's Spark stage, run by an executor's Python worker.

It finds its peers through the barrier (`BarrierTaskContext.allGather`: each task's executor
address and a port it chose), makes the gang's TF_CONFIG from them, and starts the trial's own
task process, unchanged: `python -m training.trial.worker`, its events and output in files of
its own on the executor, as a worker node's are. Their lines go home over the trial's channel
(channel.py) while it runs, then its exit code.

Exit codes decide whether Spark retries: a task killed or failing in the cluster raises, which
fails the barrier stage, and Spark runs the whole gang again (the trial resumes from its last
checkpoint on shared storage); the user's own error is returned as a result instead, because
running it again would only repeat it.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from training.events import LineTail
from training.exit_codes import EXIT_OK
from training.signals import SUPERVISOR_PID_ENV
from training.spark.channel import ChannelSender, channel_open, task_token
from training.spark.feed import FEED_FD_ENV, FEED_SIZES_ENV, feed_table, feed_write
from training.supervisor.outcome import exit_describe
from training.tf_config import ClusterPlan, TaskAddress

POLL_SECONDS = 0.2
PORT_TRIES = 200
PR_SET_PDEATHSIG = 1
# The executor's settings a trial may see; nothing else of its environment reaches it.
PASSTHROUGH_ENV = ("TF_CPP_MIN_LOG_LEVEL", "TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS",
                   "OMP_NUM_THREADS", "TZ", "LANG", "LC_ALL", "JAVA_HOME")


def _stop_with_parent() -> None:
    """In the trial process before it runs: SIGTERM when this task's process dies, as Spark
    kills it when the gang's stage fails or its job is canceled (the trial then checkpoints
    and ends; training/signals.py's orphan watch kills it after its grace period)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class TaskFailed(RuntimeError):
    """Fails the barrier stage, so that Spark runs the gang again."""


def _plan(*, kinds: list[tuple[str, int]], addresses: list[str], key: str) -> ClusterPlan:
    tasks = []
    for (kind, index), address in zip(kinds, addresses, strict=True):
        host, _, port = address.rpartition(":")
        tasks.append(TaskAddress(kind, index, host, int(port)))
    return ClusterPlan(tuple(tasks), dispatch_key=key)


def _port_choose(*, host: str, base: int, span: int) -> int:
    """A port of [base, base + span) that binds now, tried in random order: the executor's
    other tasks (another trial's gang) choose from the same range."""
    for port in random.sample(range(base, base + span), k=min(span, PORT_TRIES)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    raise TaskFailed(f"no free port in {base}-{base + span - 1} on {host}")


def _environment(*, order: dict[str, Any], plan: ClusterPlan, task: TaskAddress, scratch: str,
                 code: str, gpus: list[str]) -> dict[str, str]:
    python = order["python"] or sys.executable
    env = {name: os.environ[name] for name in PASSTHROUGH_ENV if name in os.environ}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("LANG", "C.UTF-8")
    env |= {
        "PATH": os.pathsep.join([str(Path(python).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": scratch, "TMPDIR": scratch, "USER": "trial", "PYTHONPATH": code,
        "TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
        "PLATFORM_TRIAL_ID": order["trial_id"], "PLATFORM_TASK": task.name,
        SUPERVISOR_PID_ENV: str(os.getpid()),
        # The GPUs Spark's resource scheduling gave this task, none where it gave none.
        "CUDA_VISIBLE_DEVICES": ",".join(gpus), "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    tf_config = plan.tf_config(task=task)
    if tf_config:
        env["TF_CONFIG"] = tf_config
    return env


def _forward(*, sender: ChannelSender, events: LineTail, output: LineTail) -> None:
    for line in events.read_lines():
        if line.strip():
            sender.event(line)
    for line in output.read_lines():
        if line.strip():
            sender.output(line)


def barrier_task(order: dict[str, Any], rows: Iterator[Any]) -> Iterator[str]:
    """The body of `rdd.barrier().mapPartitions(...)`: one per task of the gang."""
    from pyspark import BarrierTaskContext, SparkFiles

    context = BarrierTaskContext.get()
    index = context.partitionId()
    kinds = [(str(kind), int(i)) for kind, i in order["kinds"]]
    host = context.getTaskInfos()[index].address.rpartition(":")[0]
    port = _port_choose(host=host, base=order["port_base"], span=order["port_span"]) \
        if len(kinds) > 1 else 0
    gathered = [json.loads(item) for item in context.allGather(json.dumps(
        {"address": f"{host}:{port}", "attempt": context.taskAttemptId()}))]
    # One name for the stage attempt all its tasks agree on: its first task attempt's id.
    attempt = str(min(item["attempt"] for item in gathered))
    plan = _plan(kinds=kinds, addresses=[item["address"] for item in gathered],
                 key=f"{order['trial_id']}/{attempt}")
    task = plan.tasks[index]
    feed = None
    if order.get("feed"):  # the query's partition (feed.py): its size is the gang's to know
        feed = feed_table(rows=rows)
        order = {**order, "feed_sizes": ",".join(context.allGather(str(feed.num_rows)))}
    sender = channel_open(
        address=order["channel"], trial_id=order["trial_id"], task=task.name, attempt=attempt,
        token=task_token(key=bytes.fromhex(order["key"]), trial_id=order["trial_id"],
                         task=task.name, attempt=attempt))
    scratch = tempfile.mkdtemp(prefix="tfp-spark-")
    try:
        code = _run(order=order, plan=plan, task=task, scratch=scratch, sender=sender,
                    feed=feed,
                    code=SparkFiles.get(order["code_zip"]),
                    gpus=list(context.resources()["gpu"].addresses)
                    if "gpu" in context.resources() else [])
    finally:
        sender.close()
        shutil.rmtree(scratch, ignore_errors=True)
    retryable, what = exit_describe(code=code)
    if code != EXIT_OK and retryable:
        raise TaskFailed(f"{task.name} {what} (exit code {code})")
    yield json.dumps({"task": task.name, "code": code})


def _run(*, order: dict[str, Any], plan: ClusterPlan, task: TaskAddress, scratch: str,
         sender: ChannelSender, code: str, gpus: list[str], feed: Any) -> int:
    files = Path(scratch)
    env = _environment(order=order, plan=plan, task=task, scratch=scratch, code=code, gpus=gpus)
    pipe: tuple[int, int] | None = None
    if feed is not None:  # the query's partition, through a pipe (feed.py)
        pipe = os.pipe()
        env |= {FEED_FD_ENV: str(pipe[0]), FEED_SIZES_ENV: order["feed_sizes"]}
    (files / "spec.json").write_text(order["spec"])
    (files / "cluster.json").write_text(plan.to_json())
    events_path, log_path = files / "events.jsonl", files / "task.log"
    events_path.touch()
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [order["python"] or sys.executable, "-m", "training.trial.worker",
             "--spec", str(files / "spec.json"), "--cluster", str(files / "cluster.json"),
             "--task-type", task.type, "--task-index", str(task.index),
             "--events", str(events_path)],
            cwd=order["cwd"], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_stop_with_parent, env=env, pass_fds=(pipe[0],) if pipe else ())
    if pipe is not None:
        os.close(pipe[0])
        threading.Thread(target=feed_write, kwargs={"table": feed, "fd": pipe[1]},
                         name="spark-feed", daemon=True).start()
    events, output = LineTail(path=str(events_path)), LineTail(path=str(log_path))
    try:
        while process.poll() is None:
            _forward(sender=sender, events=events, output=output)
            time.sleep(POLL_SECONDS)
        _forward(sender=sender, events=events, output=output)
        sender.exit(process.returncode)
        return process.returncode
    finally:
        if process.poll() is None:  # the channel broke: nobody hears the trial any more
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
