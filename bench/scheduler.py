"""Item 4: the scheduler with 1,000 queued experiments of mixed sizes on 50 declared nodes.

The measuring runs in bench/scheduler_child.py's own process (Django set up there, a Celery
broker in memory so dispatch costs a publish and nothing more), once per database: a
throwaway SQLite file, and the PostgreSQL database `bench_tfplatform` created for the run and
dropped afterwards (skipped, with a note, when no server answers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench import stats
from bench.report import BarChart, Section, Table, Target, number

ROOT = Path(__file__).resolve().parents[1]
POSTGRES_ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"
BENCH_DATABASE = "bench_tfplatform"
# The performance round's goal (issue #43), on PostgreSQL at 1,000 queued × 50 nodes.
DECISIONS_PER_SECOND = 4000
# ... and at ten times the queue on ten times the nodes: decision rate only (no drain).
LARGE = (10_000, 500)
LARGE_DECISIONS_PER_SECOND = 1000


@contextmanager
def sqlite_database(directory: Path) -> Iterator[str]:
    yield f"sqlite:///{directory / 'scheduler.sqlite3'}"


@contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {BENCH_DATABASE}")
    try:
        yield urlunsplit(urlsplit(admin_url)._replace(path=f"/{BENCH_DATABASE}"))
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")


UNBOUNDED = 1_000_000


def child_run(*, database_url: str, var_dir: Path, repeats: int, queued: int = 1000,
              nodes: int = 50, drain: bool = True) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("CELERY_BROKER_URL", "CACHE_URL")}
    env |= {
        "DJANGO_SETTINGS_MODULE": "tfplatform.config.settings",
        "DATABASE_URL": database_url,
        "PLATFORM_VAR_DIR": str(var_dir),
        "CELERY_BROKER_URL": "memory://",
        "PLATFORM_LOG_LEVEL": "WARNING",
        # The load as earlier runs measured it: GPU quotas only (scheduler_load's teams too).
        "PLATFORM_USER_MAX_RUNNING": "0",
        "PLATFORM_USER_CPU_SLOT_QUOTA": str(UNBOUNDED),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "platform"), str(ROOT)]),
    }
    out = var_dir / "scheduler.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.scheduler_child", "--out", str(out),
         "--repeats", str(repeats), "--queued", str(queued), "--nodes", str(nodes),
         *([] if drain else ["--no-drain"])],
        cwd=ROOT, env=env, capture_output=True, timeout=1800, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"scheduler_child failed ({done.returncode}):\n"
                           f"{done.stderr.decode(errors='replace')[-3000:]}")
    return dict(json.loads(out.read_text()))


def _rate(passes: list[dict[str, Any]]) -> float:
    return stats.median([p["queued"] / p["seconds"] for p in passes])


def scheduler_measure(*, databases: list[str], repeats: int, large: bool = True) -> Section:
    """Each database at 1,000 × 50 (decision rate and drain); PostgreSQL also at LARGE (decision
    rate) unless `large` is off."""
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    notes: list[str] = []
    runs = [(name, 1000, 50) for name in databases]
    if large and "postgresql" in databases:
        runs.append(("postgresql", *LARGE))
    for name, queued, nodes in runs:
        with tempfile.TemporaryDirectory(prefix="bench-scheduler-") as scratch:
            database: AbstractContextManager[str]
            if name == "postgresql":
                database = postgres_database(os.environ.get("BENCH_POSTGRES_URL",
                                                            POSTGRES_ADMIN_URL))
            else:
                database = sqlite_database(Path(scratch))
            try:
                with database as url:
                    results.append(child_run(database_url=url, var_dir=Path(scratch),
                                             repeats=repeats, queued=queued, nodes=nodes,
                                             drain=queued == 1000))
            except (ImportError, OSError) as error:
                notes.append(f"{name} skipped: {error}")
            except Exception as error:  # psycopg's OperationalError: no server to talk to
                if type(error).__module__.startswith("psycopg"):
                    notes.append(f"{name} skipped: {error}")
                else:
                    raise
    return scheduler_section(results=results, notes=notes, repeats=repeats,
                    seconds=time.monotonic() - started)


def scheduler_section(*, results: list[dict[str, Any]], notes: list[str], repeats: int,
             seconds: float) -> Section:
    rate_rows, latency_rows, targets = [], [], []
    for result in results:
        cold, warm = result["cold"], result["warm"]
        size = f"{result['queued']:,} × {result['nodes']}"
        goal = DECISIONS_PER_SECOND if result["queued"] == 1000 else LARGE_DECISIONS_PER_SECOND
        targets.append(Target(f"decisions/s, {size}, cold pass ({result['database']})",
                              _rate(cold), ">=", goal))
        for label, passes in (("cold: idle cluster", cold), ("warm: nothing changed", warm)):
            rate_rows.append((
                result["database"], size, label, str(passes[0]["queued"]),
                str(passes[0]["scheduled"]),
                number(stats.median([p["seconds"] * 1000 for p in passes]), 0),
                number(stats.median([p["cpu_seconds"] * 1000 for p in passes]), 0),
                number(_rate(passes), 0),
            ))
        if "drain" not in result:
            continue
        drained = result["drain"]
        waits = drained["latencies"]
        pass_ms = [p["seconds"] * 1000 for p in drained["passes"]]
        latency_rows.append((
            result["database"], str(len(waits)), number(stats.percentile(waits, 50), 2),
            number(stats.percentile(waits, 99), 2), number(min(waits), 2),
            str(len(pass_ms)), number(stats.percentile(pass_ms, 50), 0),
            number(stats.percentile(pass_ms, 99), 0), number(_rate(drained["passes"]), 0),
            str(drained["preempted"]), number(drained["seconds"], 1),
        ))
    return Section(
        title="4. Scheduler",
        description=(
            "50 declared nodes × (8 GPU slots + 4 CPU slots); 1,000 queued experiments of mixed "
            "sizes (1/1/2/4 workers × 0/1/2/4/8 GPUs, a parameter server in a third, priority 5 "
            "in a third) from three teams with GPU quotas and one user without a team. Run in a "
            "Django process of its own against each database; Celery dispatch to an in-memory "
            "broker. Decision rate = experiments considered ÷ pass wall time (commit and "
            f"dispatch included), median of {repeats} pass(es) from a reset queue. Drain: the "
            "1,000 arrive at once, passes run back to back (the platform wakes its scheduler on "
            "every submission and trial end), each trial ends after a simulated 0.5-2 s run; "
            "queue-to-allocation latency = the allocating pass's commit − the arrival. On "
            "PostgreSQL the decision rate is also measured at 10,000 queued on 500 nodes."
        ),
        tables=[
            Table(columns=("database", "queued × nodes", "pass", "queued", "scheduled",
                           "wall ms", "CPU ms", "decisions/s"), rows=rate_rows),
            Table(title="Drain of the 1,000-experiment burst",
                  columns=("database", "allocated", "latency p50 s", "latency p99 s",
                           "latency min s", "passes", "pass p50 ms", "pass p99 ms",
                           "decisions/s (median pass)", "preemptions", "drain s"),
                  rows=latency_rows),
        ],
        targets=targets,
        charts=[BarChart(
            "scheduler_decisions_per_sec.png", "Scheduler decisions per second, cold and warm pass",
            "decisions/s",
            tuple(f"{r['database'].split()[0]} {r['queued']:,}×{r['nodes']}" for r in results),
            {"cold pass": tuple(_rate(r["cold"]) for r in results),
             "warm pass": tuple(_rate(r["warm"]) for r in results)},
        )] if results else [],
        notes=notes,
        seconds=seconds,
    )
