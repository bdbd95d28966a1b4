"""Item 10: the same job on the stack's worker node and on the Spark backend (#46).

A Spark cluster (`local[2]`: Spark's executors on this machine) is registered through the API
and served by its node process (`manage.py spark_node`); the same 2-worker MultiWorkerMirrored
job is then submitted alternately to the worker node and to the Spark pool. Compared: the
median steady images/sec and the time from submission to the first training step, whose
difference is mostly the Spark application's start (a JVM, the driver, the executors' Python
workers).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench import stats
from bench.api import PlatformClient
from bench.report import BarChart, Section, Table
from bench.runs import TrainingRun, Workload, platform_run

CLUSTER: dict[str, Any] = {"name": "bench", "master": "local[2]", "task_slots": 2,
           "conf": {"spark.driver.memory": "512m"}}
POOL = "spark-bench"
WORKERS = 2


def spark_cluster_ready(client: PlatformClient, *, spawn: Callable[[], object],
                        timeout: float = 120) -> None:
    """Registers the cluster (as staff) and starts its node process; back once it consumes."""
    client.spark_cluster_register(cluster=CLUSTER)
    spawn()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(node["hostname"] == POOL for node in client.nodes()):
            return
        time.sleep(1)
    raise TimeoutError(f"the Spark cluster's node did not register within {timeout:.0f}s")


def spark_measure(client: PlatformClient, *, workload: Workload, repeats: int) -> Section:
    started = time.monotonic()
    runs: dict[str, list[TrainingRun]] = {"worker node": [], "Spark backend": []}
    for repeat in range(repeats):
        for label, resources in (("worker node", {"workers": WORKERS}),
                                 ("Spark backend", {"workers": WORKERS, "pool": POOL})):
            runs[label].append(platform_run(client, label=f"{label} {repeat}",
                                            resources=resources, workload=workload))
    rates = {label: stats.median([r.steady_images_per_sec for r in done])
             for label, done in runs.items()}
    firsts = {label: stats.median([s for r in done if (s := r.first_step_seconds) is not None])
              for label, done in runs.items()}
    ratio = rates["Spark backend"] / rates["worker node"]
    table = Table(
        columns=("backend", "images/sec (median of steady epochs)",
                 "submit → first step (s, median)", "runs"),
        rows=[(label, f"{rates[label]:.0f}", f"{firsts[label]:.2f}", str(len(runs[label])))
              for label in runs],
    )
    return Section(
        title="10. Spark backend",
        description=(
            f"Workload: {workload.describe()}, {WORKERS} workers (MultiWorkerMirroredStrategy), "
            f"{repeats} round(s) alternating the stack's worker node and a Spark cluster "
            f"(`{CLUSTER['master']}`, pool `{POOL}`) served by `manage.py spark_node`, both on "
            "this machine. Each Spark trial is its own application: the first step waits for "
            "a JVM, the driver and the executors' Python workers."),
        tables=[table],
        charts=[BarChart("spark_first_step.png", "Submit → first step", "seconds",
                         tuple(runs), {"seconds": tuple(firsts[label] for label in runs)})],
        notes=[f"Spark ÷ worker node, steady images/sec: {ratio:.2f}. First step, Spark minus "
               f"worker node: {firsts['Spark backend'] - firsts['worker node']:+.2f} s."],
        seconds=time.monotonic() - started,
    )
