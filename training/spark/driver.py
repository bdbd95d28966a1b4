"""The Spark application of one trial attempt: `python -m training.spark.driver ORDER RESULT`.

ORDER (JSON, written by supervise.py) names the cluster, the trial and the channel; RESULT is
where this program writes how the job ended. Its gang is one barrier stage, one task per
worker (and parameter server), followed by a shuffle: Spark runs a failed barrier stage again
only when it is a map stage, and retrying is what a lost executor or a killed task needs.

Standard output carries one JSON line per thing the supervisor shows: the application's id,
and what the cluster keeps the gang waiting for. SIGTERM cancels the job (Spark kills its
tasks; each trial process checkpoints as it ends) and stops the application.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from training.spark.target import QUERY_HYPERPARAMETER, SparkTarget

STATUS_SECONDS = 2.0
# How long the gang may wait for task slots before the wait is reported as the pending reason.
WAITING_REPORT_SECONDS = 6.0


def _say(**message: Any) -> None:
    print(json.dumps(message), flush=True)


def _session(*, target: SparkTarget, app_name: str, code_zip: str, gpus_per_task: int) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(target.master).appName(app_name)
    conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
            **target.conf,
            "spark.stage.maxConsecutiveAttempts": str(target.stage_attempts),
            # Each task's GPUs from Spark's GPU scheduling (the executors' amount and discovery
            # script are the cluster's configuration); none for a CPU trial.
            **({"spark.task.resource.gpu.amount": str(gpus_per_task)} if gpus_per_task else {}),
            # The barrier stage must get all its slots at once; Spark checks that before it
            # starts and fails the job if the cluster can never give them (the supervisor
            # reports its reason).
            "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "5s"}
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.addPyFile(code_zip)
    return session


def _watch_waiting(*, context: Any, tasks: int, done: threading.Event) -> None:
    """Says when none of the gang's tasks runs: the cluster's own pending state (no executors
    yet, or too few free slots: a barrier stage starts all its tasks at once or none, and Spark
    checks for the slots before it submits the stage)."""
    since: float | None = None
    said = ""
    while not done.wait(STATUS_SECONDS):
        tracker = context.statusTracker()
        running = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None and info.numTasks == tasks:
                running = max(running, info.numActiveTasks)
        if running:
            since, said = None, ""
            continue
        since = since if since is not None else time.monotonic()
        if time.monotonic() - since >= WAITING_REPORT_SECONDS:
            executors = len(tracker.getExecutorInfos()) if hasattr(
                tracker, "getExecutorInfos") else 0
            message = (f"Waiting for the Spark cluster: the gang's {tasks} tasks need "
                       f"{tasks} free task slots at once")
            message += f" ({executors} executor(s) registered)" if executors else ""
            if message != said:
                _say(waiting=message)
                said = message


def driver_main(*, order_path: str, result_path: str) -> int:
    from training.spark.task import barrier_task

    order = json.loads(Path(order_path).read_text())
    target = SparkTarget.from_dict(order["target"])
    result: dict[str, Any] = {"status": "failed", "reason": "the driver did not start"}
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    session = None
    try:
        resources = json.loads(order["spec"])["resources"]
        session = _session(target=target, app_name=order["app_name"],
                           code_zip=order["code_zip"],
                           gpus_per_task=int(resources.get("gpus_per_worker") or 0))
        context = session.sparkContext
        _say(application=context.applicationId, master=target.master)
        tasks = len(order["kinds"])
        task_order = {k: order[k] for k in ("trial_id", "spec", "kinds", "channel", "key",
                                              "code_zip", "cwd", "python")}
        task_order["code_zip"] = Path(order["code_zip"]).name
        task_order |= {"port_base": target.port_base, "port_span": target.port_span}
        query = str(json.loads(order["spec"])["hyperparameters"].get(QUERY_HYPERPARAMETER) or "")
        task_order["feed"] = bool(query)
        # One partition per task: the query's rows split among the workers (feed.py), or none.
        source = (session.sql(query).repartition(tasks).rdd if query
                  else context.parallelize(range(tasks), tasks))
        rdd = (source.barrier()
               .mapPartitions(functools.partial(barrier_task, task_order))
               .repartition(1))
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                outcome["results"] = [json.loads(item) for item in rdd.collect()]
            except Exception as error:  # py4j's, Spark's: the reason is all that matters here
                outcome["error"] = str(error)
            finally:
                done.set()

        threading.Thread(target=run, name="spark-job", daemon=True).start()
        threading.Thread(target=_watch_waiting, kwargs={
            "context": context, "tasks": tasks, "done": done}, daemon=True).start()
        while not done.wait(0.2):
            if stop.is_set():
                context.cancelAllJobs()
                done.wait(60)
                result = {"status": "canceled", "reason": "canceled"}
                break
        else:
            result = ({"status": "finished", "results": outcome["results"]}
                      if "results" in outcome else
                      {"status": "failed", "reason": _reason(str(outcome.get("error", "")))})
    except Exception as error:
        result = {"status": "failed", "reason": _reason(str(error))}
    finally:
        Path(result_path).write_text(json.dumps(result))
        if session is not None:
            session.stop()
    return 0


# A stack frame as Java prints it ("at a.b.C.m(C.java:12)", "java.base/a.B.m(Native Method)").
_JAVA_FRAME = re.compile(r"\s*(at\s+)?[\w$./<>]+\([^()]*\)\s*$")


def _reason(text: str) -> str:
    """Spark's failure, without the Java stack that follows it."""
    lines = [line for line in text.splitlines() if line.strip() and not
             _JAVA_FRAME.match(line)]
    return "\n".join(lines[:12])[:4000] or "the Spark job failed"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m training.spark.driver",
                                     description="One trial attempt's Spark application.")
    parser.add_argument("order", help="the attempt's order (JSON, written by supervise.py)")
    parser.add_argument("result", help="where to write how the job ended (JSON)")
    return parser.parse_args()


if __name__ == "__main__":
    arguments = _arguments()
    code = driver_main(order_path=arguments.order, result_path=arguments.result)
    sys.stdout.flush()
    import os

    os._exit(code)
