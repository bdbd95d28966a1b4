"""The scheduler benchmark's own process (Django is set up here, never in `python -m bench`):

    DATABASE_URL=... python -m bench.scheduler_child --out result.json --repeats 3

1. Decision rate: one scheduler pass over the 1,000 queued experiments on an idle cluster
   (cold), then one more with nothing changed (warm); decisions/s = experiments considered ÷
   the pass's wall time, commit and dispatch included. Repeated from a reset queue.
2. Queue-to-allocation latency: the 1,000 arrive together; passes run back to back, as the
   platform wakes its scheduler on every submission and trial end; a simulated node ends each
   trial after a run time drawn from [run_min, run_max] seconds (and stops preempted ones at
   once). Latency = the commit of the pass that allocated an experiment − the burst's arrival.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import django

# Passes in a row that admit nothing while no trial runs: nothing will change, so the drain
# fails at once with the queue's reasons instead of waiting for its timeout.
STALLED_PASSES = 3


def _setup() -> None:
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def _timed_pass() -> dict[str, Any]:
    from tfplatform.experiments.models import Experiment
    from tfplatform.experiments.services.scheduling import scheduler_pass

    queued = Experiment.objects.filter(state=Experiment.State.QUEUED).count()
    wall, cpu = time.perf_counter(), time.process_time()
    scheduled = scheduler_pass()
    return {"queued": queued, "scheduled": scheduled, "seconds": time.perf_counter() - wall,
            "cpu_seconds": time.process_time() - cpu}


def decision_rate(*, repeats: int) -> dict[str, list[dict[str, Any]]]:
    from bench.scheduler_load import queue_reset

    cold, warm = [], []
    for _ in range(repeats):
        queue_reset()
        cold.append(_timed_pass())
        warm.append(_timed_pass())
    return {"cold": cold, "warm": warm}


def _pending_reasons() -> str:
    """Why the experiments still queued wait, most common first: what a failed drain says."""
    from django.db.models import Count

    from tfplatform.experiments.models import Experiment

    reasons = (Experiment.objects.filter(state=Experiment.State.QUEUED)
               .values("pending_reason").annotate(n=Count("pk")).order_by("-n")[:5])
    return "still queued: " + "; ".join(f"{r['n']} × {r['pending_reason']!r}" for r in reasons)


def drain(*, seed: int, run_min: float, run_max: float, timeout: float) -> dict[str, Any]:
    from bench.scheduler_load import nodes_heartbeat, queue_reset, trials_end, trials_preempted
    from tfplatform.experiments.models import Experiment, Trial

    queue_reset()
    rng = random.Random(seed)
    arrived = time.perf_counter()
    latencies: dict[int, float] = {}  # experiment → seconds, first allocation only
    ends: dict[int, float] = {}  # trial → when its simulated run is over
    passes, seen, preempted, beat, idle = [], 0, 0, arrived, 0
    while Experiment.objects.filter(state=Experiment.State.QUEUED).exists():
        if time.perf_counter() - arrived > timeout:
            raise TimeoutError(f"the queue did not drain in {timeout:.0f}s; {_pending_reasons()}")
        passes.append(_timed_pass())
        committed = time.perf_counter()
        for trial, experiment in Trial.objects.filter(pk__gt=seen).values_list(
                "pk", "experiment_id"):
            latencies.setdefault(experiment, committed - arrived)
            ends[trial] = committed + rng.uniform(run_min, run_max)
            seen = max(seen, trial)
        stopped = trials_preempted()
        preempted += len(stopped)
        for trial in stopped:
            ends.pop(trial, None)
        idle = 0 if passes[-1]["scheduled"] or stopped or ends else idle + 1
        if idle >= STALLED_PASSES:
            raise RuntimeError(f"the queue stopped draining: nothing runs and {STALLED_PASSES} "
                               f"passes admitted nothing; {_pending_reasons()}")
        if not stopped:
            now = time.perf_counter()
            if ends and min(ends.values()) > now:
                time.sleep(min(ends.values()) - now)  # nothing to decide until a trial ends
            now = time.perf_counter()
            over = [trial for trial, end in ends.items() if end <= now]
            trials_end(trial_ids=over)
            for trial in over:
                del ends[trial]
        if time.perf_counter() - beat > 5:
            nodes_heartbeat()
            beat = time.perf_counter()
    return {"latencies": list(latencies.values()), "passes": passes, "preempted": preempted,
            "seconds": time.perf_counter() - arrived}


def _database() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SHOW server_version")
            return f"PostgreSQL {cursor.fetchone()[0]}"
        cursor.execute("SELECT sqlite_version()")
        return f"SQLite {cursor.fetchone()[0]}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scheduler_child")
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--run-min", type=float, default=0.5)
    parser.add_argument("--run-max", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--no-drain", action="store_true", help="the decision rate alone")
    args = parser.parse_args(argv)
    _setup()
    from bench.scheduler_load import cluster_declare, queue_fill

    cluster_declare(nodes=args.nodes)
    queue_fill(seed=args.seed, count=args.queued)
    result = {
        "database": _database(), "queued": args.queued, "nodes": args.nodes,
        **decision_rate(repeats=args.repeats),
    }
    if not args.no_drain:
        result["drain"] = drain(seed=args.seed, run_min=args.run_min, run_max=args.run_max,
                                timeout=args.timeout)
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
