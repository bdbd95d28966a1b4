"""`make bench`: run the benchmarks and write bench/results/<date>.md."""

import datetime
import os
import statistics
from pathlib import Path

from bench.dispatch import dispatch_measure
from bench.machine import machine_describe

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/2")
    broker_url = os.environ.get("CELERY_BROKER_URL", redis_url)
    dispatch = dispatch_measure(broker_url=broker_url, redis_url=redis_url)
    lines = [
        f"# Benchmarks {datetime.date.today().isoformat()}",
        "",
        f"Machine: {machine_describe()}",
        "",
        "## Celery dispatch",
        "",
        "| measure | median ms | p99 ms |",
        "|---|---|---|",
        _row(f"no-op task round trip ({dispatch.broker} broker)", dispatch.celery_ms),
        _row("raw Redis round trip", dispatch.redis_ms),
        "",
        f"Celery round trip ÷ raw Redis round trip: **{dispatch.ratio:.1f}×** "
        f"(medians of {len(dispatch.celery_ms)} round trips each).",
        "",
    ]
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{datetime.date.today().isoformat()}.md"
    path.write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"written to {path}")


def _row(name: str, samples: list[float]) -> str:
    p99 = statistics.quantiles(samples, n=100)[98]
    return f"| {name} | {statistics.median(samples):.2f} | {p99:.2f} |"


if __name__ == "__main__":
    main()
