"""Celery dispatch overhead: a no-op task's round trip through the configured broker, divided by
a raw Redis round trip (LPUSH to a list a consumer thread BRPOPs and answers), both measured in
the same run against the same Redis.
"""

import contextlib
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import redis
from celery import Celery, current_app
from celery import _state as celery_state
from celery.contrib.testing.worker import start_worker

from bench.report import Section, Table, number
from bench.stats import median, percentile


@dataclass(frozen=True)
class DispatchResult:
    broker: str
    celery_ms: list[float]
    redis_ms: list[float]

    @property
    def ratio(self) -> float:
        return statistics.median(self.celery_ms) / statistics.median(self.redis_ms)


def _raw_redis_round_trips(*, url: str, count: int) -> list[float]:
    client = redis.Redis.from_url(url)
    request, reply = f"bench:req:{uuid.uuid4().hex}", f"bench:rep:{uuid.uuid4().hex}"

    def echo() -> None:
        server = redis.Redis.from_url(url)
        for _ in range(count):
            _, body = server.brpop([request])  # type: ignore[misc]
            server.lpush(reply, body)

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    samples = []
    for index in range(count):
        started = time.perf_counter()
        client.lpush(request, str(index))
        client.brpop([reply])
        samples.append((time.perf_counter() - started) * 1000)
    thread.join(timeout=5)
    return samples


@contextlib.contextmanager
def _process_apps_kept() -> Iterator[None]:
    """A new Celery app makes itself this process's current one, and Celery's test worker makes
    its app the default too. Left so, the process's sends by task name (`current_app.send_task`:
    the platform's wake-ups, from any thread) would go to this app's broker and queue, where
    nothing takes them."""
    current, default = current_app._get_current_object(), celery_state.default_app
    try:
        yield
    finally:
        current.set_current()
        celery_state.set_default_app(default)


def dispatch_measure(*, broker_url: str, redis_url: str, count: int = 300) -> DispatchResult:
    with _process_apps_kept():
        return _dispatch_measured(broker_url=broker_url, redis_url=redis_url, count=count)


def _dispatch_measured(*, broker_url: str, redis_url: str, count: int) -> DispatchResult:
    # No Django fixup: this app needs no Django, and the fixup's django.setup() would reconfigure
    # this process's logging, closing every handler there is (absl's closes its stream, which
    # under pytest is the capture file).
    app = Celery("bench", broker=broker_url, backend=redis_url, fixups=[])
    app.conf.update(task_acks_late=True, worker_prefetch_multiplier=1, result_expires=60)

    @app.task(name="bench.noop")
    def noop() -> None:
        return None

    queue = f"bench-{uuid.uuid4().hex[:8]}"
    app.conf.task_default_queue = queue
    samples = []
    with start_worker(
        app, pool="solo", perform_ping_check=False, queues=[queue], loglevel="WARNING"
    ):
        noop.delay().get(timeout=30)  # warm: connections and queues exist before timing
        for _ in range(count):
            started = time.perf_counter()
            noop.delay().get(timeout=30)
            samples.append((time.perf_counter() - started) * 1000)
    return DispatchResult(
        broker=broker_url.split("://")[0],
        celery_ms=samples,
        redis_ms=_raw_redis_round_trips(url=redis_url, count=count),
    )


def dispatch_section(*, broker_url: str, redis_url: str, count: int) -> Section:
    started = time.monotonic()
    result = dispatch_measure(broker_url=broker_url, redis_url=redis_url, count=count)

    def row(name: str, samples: list[float]) -> tuple[str, str, str]:
        return (name, number(median(samples), 2), number(percentile(samples, 99), 2))

    return Section(
        title="5. Celery dispatch",
        description=(
            f"A no-op task's round trip (delay → solo worker → result) through the {result.broker}"
            f" broker, against a raw Redis round trip (LPUSH → a thread's BRPOP → LPUSH back), "
            f"{count} sequential round trips each after a warm-up, against the same Redis."
        ),
        tables=[Table(
            columns=("measure", "median ms", "p99 ms"),
            rows=[row(f"no-op task round trip ({result.broker} broker)", result.celery_ms),
                  row("raw Redis round trip", result.redis_ms)],
        )],
        notes=[f"Celery round trip ÷ raw Redis round trip: {result.ratio:.1f}× (medians)."],
        seconds=time.monotonic() - started,
    )
