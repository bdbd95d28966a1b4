"""Diagnostic job "pi": Monte Carlo estimate of π on every allocated device and worker.

The classic distributed-TF smoke test: each replica draws uniform points in the unit square with
its own stateless seed and counts those inside the quarter circle; the counts are summed across
replicas (an all-reduce under the mirrored strategies), π ≈ 4·inside/total. Each task reports the
samples per second it produced, which makes a slow device or link visible at a glance.

Under ParameterServerStrategy the chief pins one computation to each worker task (remote eager
execution over the cluster the strategy connected to) and times the workers in parallel threads.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from training.events import EventWriter
from training.trial.strategy import PARAMETER_SERVER, StrategyPlan
from training.trial.tfenv import tf


def _count_inside(*, samples: int, seed: Any) -> Any:
    points = tf.random.stateless_uniform([samples, 2], seed=seed, dtype=tf.float32)
    inside = tf.reduce_sum(points * points, axis=1) <= 1.0
    return tf.reduce_sum(tf.cast(inside, tf.int64))


def _mirrored(*, strategy: Any, samples: int, rounds: int) -> tuple[int, int, float]:
    @tf.function
    def step(round_index: Any) -> Any:
        def replica_fn() -> Any:
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            seed = tf.stack([tf.cast(round_index, tf.int32), tf.cast(replica, tf.int32)])
            return _count_inside(samples=samples, seed=seed)

        per_replica = strategy.run(replica_fn)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    step(tf.constant(-1))  # trace and warm up outside the timed rounds
    start = time.perf_counter()
    inside = sum(int(step(tf.constant(r))) for r in range(rounds))
    seconds = time.perf_counter() - start
    total = samples * rounds * strategy.num_replicas_in_sync
    return inside, total, seconds


def _parameter_server(*, workers: int, samples: int, rounds: int
                      ) -> tuple[int, int, dict[str, float]]:
    def on_worker(index: int) -> tuple[int, float]:
        with tf.device(f"/job:worker/replica:0/task:{index}"):
            _count_inside(samples=samples, seed=tf.constant([-1, index]))  # warm-up
            start = time.perf_counter()
            inside = sum(
                int(_count_inside(samples=samples, seed=tf.constant([r, index])))
                for r in range(rounds)
            )
        return inside, time.perf_counter() - start

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(on_worker, range(workers)))
    rates = {f"worker:{i}": samples * rounds / seconds for i, (_, seconds) in enumerate(results)}
    return sum(inside for inside, _ in results), samples * rounds * workers, rates


def _local_replicas(*, strategy: Any) -> int:
    try:
        return len(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy has no device list: one replica, this process
        return 1


def pi_run(*, strategy: Any, plan: StrategyPlan, hparams: dict[str, Any], events: EventWriter,
           is_chief: bool) -> dict[str, Any]:
    samples, rounds = hparams["pi_samples_per_replica"], hparams["pi_rounds"]
    start = time.perf_counter()
    if plan.name == PARAMETER_SERVER:
        inside, total, rates = _parameter_server(workers=plan.workers, samples=samples,
                                                 rounds=rounds)
        for task, rate in rates.items():
            events.emit("metric", job="pi", worker=task, samples_per_sec=round(rate, 1))
    else:
        inside, total, seconds = _mirrored(strategy=strategy, samples=samples, rounds=rounds)
        local = _local_replicas(strategy=strategy)
        rate = samples * rounds * local / seconds
        # Every worker reports its own rate; the estimate is the same everywhere after all-reduce.
        events.emit("metric", job="pi", worker=events.task, local_replicas=local,
                    samples_per_sec=round(rate, 1))
        rates = {events.task: rate}
    estimate = 4.0 * inside / total
    result = {
        "job": "pi", "pi": estimate, "abs_error": abs(estimate - math.pi), "samples": total,
        "seconds": round(time.perf_counter() - start, 3),
        "samples_per_sec": round(sum(rates.values()), 1),
    }
    return result if is_chief else {}
