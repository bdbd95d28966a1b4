"""A closed-loop load generator: `concurrency` threads, each its own client, sending requests
back to back until `requests` have been answered; latency per request, throughput overall."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench import stats

Call = Callable[[], None]


@dataclass(frozen=True)
class LoadResult:
    latencies_ms: list[float]
    seconds: float

    @property
    def throughput(self) -> float:
        return len(self.latencies_ms) / self.seconds

    @property
    def p50(self) -> float:
        return stats.percentile(self.latencies_ms, 50)

    @property
    def p99(self) -> float:
        return stats.percentile(self.latencies_ms, 99)


def load_run(*, make_call: Callable[[], Call], concurrency: int, requests: int,
             warmup: int = 5) -> LoadResult:
    """Every thread makes its own client (`make_call`) and warms it up before the clock starts."""
    if concurrency < 1 or requests < concurrency:
        raise ValueError("need at least one thread and one request per thread")
    ready = threading.Barrier(concurrency + 1)
    lock = threading.Lock()
    remaining = [requests]
    latencies: list[float] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            call = make_call()
            for _ in range(warmup):
                call()
        except BaseException as exc:  # reported below; the barrier must still be reached
            errors.append(exc)
            ready.abort()
            return
        ready.wait()
        mine = []
        try:
            while True:
                with lock:
                    if remaining[0] == 0:
                        break
                    remaining[0] -= 1
                began = time.perf_counter()
                call()
                mine.append((time.perf_counter() - began) * 1000)
        except BaseException as exc:
            errors.append(exc)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a client failed: reported below
        ready.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]!r}") from errors[0]
    return LoadResult(latencies_ms=latencies, seconds=seconds)
