"""`make bench` / `python -m bench`: run the benchmarks, write bench/results/<date>.md and plots.

    python -m bench                                  # everything (about 20 minutes)
    python -m bench --only inference,scheduler       # a subset, written as <date>-<items>.md
    python -m bench --quick --results /tmp/bench     # reduced sizes, for development
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.machine import machine_describe, versions_describe
from bench.plots import chart_write
from bench.report import Section, failure_section, report_markdown, section_text
from training.isolation.container_settings import RUNTIME_IMAGE
from training.isolation.runtime import CONTAINER_RUNTIMES

if TYPE_CHECKING:
    from bench.runs import Workload
    from bench.stack import Stack

RESULTS = Path(__file__).resolve().parent / "results"
ITEMS = ("configurations", "overhead", "inference", "scheduler", "dispatch", "input_pipeline",
         "search", "batching", "sharing", "spark")
STACK_ITEMS = ("configurations", "overhead", "inference", "spark")
# Each item's section title (numbered as in the issue): a failed item keeps its place.
TITLES = {"configurations": "1. Configuration comparison",
          "overhead": "2. Platform overhead on training", "inference": "3. Inference",
          "scheduler": "4. Scheduler", "dispatch": "5. Celery dispatch",
          "input_pipeline": "6. Input pipeline", "search": "7. Hyperparameter search",
          "batching": "8. Batching, open loop", "sharing": "9. GPU sharing and fair share",
          "spark": "10. Spark backend"}


class Report:
    """The report so far, written again as each item ends: an item that fails (or a run that
    is stopped) loses only itself, and a failure is in the report as its own section."""

    def __init__(self, *, args: argparse.Namespace) -> None:
        self.args = args
        self.started = time.monotonic()
        self.today = datetime.date.today().isoformat()
        self.stem = (self.today if args.items == list(ITEMS)
                     else f"{self.today}-{'-'.join(args.items)}")
        if args.production:
            self.stem += "-production"
        self.path = args.results / f"{self.stem}.md"
        self.sections: list[Section] = []

    def add(self, section: Section) -> None:
        self.sections.append(section)
        self.sections.sort(key=lambda s: s.title)
        print(section_text(section), flush=True)
        plots = self.args.results / self.stem
        for chart in section.charts:
            chart_write(chart, directory=plots)
        self.write()

    def measure(self, item: str, measure: Callable[[], Section]) -> None:
        started = time.monotonic()
        try:
            section = measure()
        except Exception as error:  # any failure of an item is reported, not fatal to the run
            section = failure_section(title=TITLES[item], error=error,
                                      seconds=time.monotonic() - started)
        self.add(section)

    @property
    def failed(self) -> list[str]:
        return [s.title for s in self.sections if s.failed]

    def write(self) -> None:
        text = report_markdown(
            title=f"Benchmarks {self.today}"
            + ("" if self.stem == self.today else f" ({', '.join(self.args.items)})"),
            machine=machine_describe(), versions=versions_describe(), sections=self.sections,
            plots_dir=self.stem, total_seconds=time.monotonic() - self.started,
        )
        self.args.results.mkdir(parents=True, exist_ok=True)
        self.path.write_text(text)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(ITEMS),
                        help=f"comma-separated subset of {', '.join(ITEMS)}")
    parser.add_argument("--quick", action="store_true",
                        help="reduced sizes (one round, fewer epochs and requests)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write")
    parser.add_argument("--rounds", type=int, default=None, help="item 1 rounds (default 2)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="item 2 repeats one after the other (default 4)")
    parser.add_argument("--side-repeats", type=int, default=None,
                        help="item 2 repeats side by side (default 8)")
    parser.add_argument("--side-epochs", type=int, default=None,
                        help="epochs per side-by-side run (default 30)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="epochs per training run (default 10; item 2: 12)")
    parser.add_argument("--requests", type=int, default=None,
                        help="item 3 requests per client thread per round (default 150)")
    parser.add_argument("--inference-rounds", type=int, default=None, help="default 5")
    parser.add_argument("--search-budget", type=int, default=None,
                        help="item 7 epochs per search (default 36; quick: 12)")
    parser.add_argument("--search-seeds", type=int, default=None,
                        help="item 7 seeds, each searched both ways (default 3; quick: 1)")
    parser.add_argument("--broker", choices=("redis", "filesystem"), default="redis",
                        help="the stack's Celery broker (Redis: BENCH_STACK_REDIS_URL)")
    parser.add_argument("--production", action="store_true",
                        help="the stack on PostgreSQL (BENCH_POSTGRES_URL's server) with a Redis "
                             "cache (BENCH_CACHE_URL), inference at concurrency 1, 8 and 32")
    parser.add_argument("--databases", default="sqlite,postgresql",
                        help="item 4 databases (postgresql needs BENCH_POSTGRES_URL's server)")
    args = parser.parse_args(argv)
    args.items = [i.strip() for i in args.only.split(",") if i.strip()]
    unknown = set(args.items) - set(ITEMS)
    if unknown:
        parser.error(f"unknown item(s) {', '.join(sorted(unknown))}; choose from {ITEMS}")
    return args


def _pick(value: int | None, *, full: int, quick: int, is_quick: bool) -> int:
    return value if value is not None else quick if is_quick else full


def _stack_measure(args: argparse.Namespace, report: Report) -> None:
    from bench.inference import BATCHING_PARAMETERS, SESSION_PARALLELISM
    from bench.runs import Workload
    from bench.stack import Stack

    quick = args.quick
    workload = Workload(epochs=_pick(args.epochs, full=10, quick=5, is_quick=quick),
                        hidden_units=1024)
    broker = os.environ.get("BENCH_STACK_REDIS_URL", "redis://127.0.0.1:6379/3")
    with contextlib.ExitStack() as scope:
        database_url = cache_url = ""
        if args.production:
            from bench.scheduler import POSTGRES_ADMIN_URL, postgres_database

            database_url = scope.enter_context(postgres_database(
                os.environ.get("BENCH_POSTGRES_URL", POSTGRES_ADMIN_URL)))
            cache_url = os.environ.get("BENCH_CACHE_URL", "rediscache://127.0.0.1:6379/4")
        var = scope.enter_context(tempfile.TemporaryDirectory(prefix="bench-stack-"))
        stack = scope.enter_context(Stack(
            var_dir=Path(var), broker_url=broker if args.broker == "redis" else "",
            batching_parameters=BATCHING_PARAMETERS,
            session_parallelism=SESSION_PARALLELISM["on"], database_url=database_url,
            cache_url=cache_url))
        _stack_items_measure(args, report, stack=stack, workload=workload)


def _stack_items_measure(args: argparse.Namespace, report: Report, *, stack: Stack,
                         workload: Workload) -> None:
    from bench.api import PlatformClient
    from bench.configurations import configurations_measure
    from bench.overhead import overhead_measure

    quick = args.quick
    client = PlatformClient(stack.base_url, stack.token)
    if os.environ.get("PLATFORM_TRIAL_RUNTIME") in CONTAINER_RUNTIMES:
        # Trials run in containers of the node's own image (no registry to pull from).
        client.environment = client.environment_create(name="node-image", image=RUNTIME_IMAGE)
    if "configurations" in args.items:
        rounds = _pick(args.rounds, full=2, quick=1, is_quick=quick)
        report.measure("configurations", lambda: configurations_measure(
            client, workload=workload, rounds=rounds))
    if "overhead" in args.items:
        # The target's runs are side by side: 8 repeats, whose range is a 99 % interval for
        # the median; long runs, since each epoch's rate still wanders by ~8 % on this VM.
        # The runs one after the other only give the first step (a 2.6× margin) and
        # whole-machine figures for reference.
        sequential = dataclasses.replace(
            workload, epochs=_pick(args.epochs, full=12, quick=5, is_quick=quick))
        side = dataclasses.replace(
            workload, epochs=_pick(args.side_epochs, full=30, quick=8, is_quick=quick))
        report.measure("overhead", lambda: overhead_measure(
            client, stack_pids=[p.pid for p in stack.processes.values()],
            workload=sequential, repeats=_pick(args.repeats, full=4, quick=1, is_quick=quick),
            side_workload=side,
            side_repeats=_pick(args.side_repeats, full=8, quick=1, is_quick=quick),
            node_restart=stack.worker_restart,
        ))
    if "spark" in args.items:
        from bench.spark import spark_cluster_ready, spark_measure
        from bench.stack import PYTHON

        def spark() -> Section:
            spark_cluster_ready(client, spawn=lambda: stack.spawn("spark", [
                PYTHON, "manage.py", "spark_node", "--cluster", "bench", "--address",
                "127.0.0.1"]))
            return spark_measure(client, workload=workload,
                                 repeats=_pick(args.repeats, full=3, quick=1, is_quick=quick))

        report.measure("spark", spark)
    if "inference" in args.items:
        from bench.inference import inference_measure

        report.measure("inference", lambda: inference_measure(
            stack, client,
            rounds=_pick(args.inference_rounds, full=5, quick=1, is_quick=quick),
            requests_per_thread=_pick(args.requests, full=150, quick=20, is_quick=quick),
            concurrency=(1, 8, 32) if args.production else (1, 8),
            shape=("production: PostgreSQL, a Redis cache and throttles" if args.production
                   else "`make run`'s: SQLite and a local-memory cache"),
        ))


def _scheduler_section(args: argparse.Namespace) -> Section:
    from bench.scheduler import scheduler_measure

    databases = [d.strip() for d in args.databases.split(",") if d.strip()]
    return scheduler_measure(databases=databases, repeats=1 if args.quick else 3,
                             large=not args.quick)


def _dispatch_section(args: argparse.Namespace) -> Section:
    from bench.dispatch import dispatch_section

    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/2")
    broker_url = os.environ.get("CELERY_BROKER_URL", redis_url)
    return dispatch_section(broker_url=broker_url, redis_url=redis_url,
                            count=50 if args.quick else 300)


def _input_pipeline_section(args: argparse.Namespace) -> Section:
    from bench.input_pipeline import input_pipeline_measure

    return input_pipeline_measure(rounds=2 if args.quick else 4,
                                  epochs=_pick(args.epochs, full=6, quick=3, is_quick=args.quick),
                                  copies=2 if args.quick else 4)


def _batching_section(args: argparse.Namespace) -> Section:
    from bench.batching_sweep import batching_sweep_measure

    return batching_sweep_measure(seconds=2.0 if args.quick else 4.0)


def _search_section(args: argparse.Namespace) -> Section:
    from bench.search import search_measure

    # Rungs at 1, 3 and 9 epochs; 36 epochs are four full random trials, a few minutes for all
    # seeds, yet room for adaptive search to stop some (Optuna promotes only a rung's best until
    # the rung holds 6 trials).
    seeds = _pick(args.search_seeds, full=3, quick=1, is_quick=args.quick)
    return search_measure(
        seeds=list(range(seeds)),
        budget=_pick(args.search_budget, full=36, quick=12, is_quick=args.quick),
        grace_period=1, reduction_factor=3, max_epochs=9,
    )


def _sharing_section(args: argparse.Namespace) -> Section:
    from bench.sharing import sharing_measure

    # A day of 1,000 jobs on 50 nodes takes minutes of scheduler passes; quick: a fifth.
    return sharing_measure(jobs=200 if args.quick else 1000, nodes=10 if args.quick else 50)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    report = Report(args=args)
    stack_items = [item for item in STACK_ITEMS if item in args.items]
    if stack_items:
        started = time.monotonic()
        try:
            _stack_measure(args, report)
        except Exception as error:  # the stack itself: what it had not measured fails with it
            done = {s.title for s in report.sections}
            for item in stack_items:
                if TITLES[item] not in done:
                    report.add(failure_section(title=TITLES[item], error=error,
                                               seconds=time.monotonic() - started))
    others: dict[str, Callable[[argparse.Namespace], Section]] = {
        "scheduler": _scheduler_section, "dispatch": _dispatch_section,
        "input_pipeline": _input_pipeline_section, "search": _search_section,
        "batching": _batching_section, "sharing": _sharing_section,
    }
    for item, measure in others.items():
        if item in args.items:
            report.measure(item, functools.partial(measure, args))
    report.write()
    minutes = (time.monotonic() - report.started) / 60
    print(f"\nwritten to {report.path} (plots in {args.results / report.stem}/) in "
          f"{minutes:.1f} min")
    if report.failed:
        print(f"failed: {', '.join(report.failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
