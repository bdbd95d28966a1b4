"""Closed-loop clients in processes of their own, one connection each, as concurrent users are.

Threads of one Python process would share a GIL: when a batch of answers lands at once (which
is what server-side batching does), eight client threads handle them one after another, and the
load generator rather than the server sets the pace. Each client process sends prepared bytes
(a serialized PredictRequest or an HTTP body) and does not parse the answer, as wrk does not.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from dataclasses import dataclass
from typing import Any

from bench.cpu import process_seconds
from bench.loadgen import Call, LoadResult

PREDICT_METHOD = "/tensorflow.serving.PredictionService/Predict"
JOB_SECONDS = 300.0


@dataclass(frozen=True)
class Request:
    protocol: str  # "grpc" (target host:port, path the method) or "http"
    target: str
    path: str
    body: bytes = b""
    method: str = "POST"
    headers: tuple[tuple[str, str], ...] = ()


def request_call(request: Request) -> Call:
    """A new connection and a call that sends `request` on it and fails on an error answer."""
    if request.protocol == "grpc":
        import grpc

        channel = grpc.insecure_channel(request.target)
        stub = channel.unary_unary(request.path)  # bytes in, bytes out

        metadata = request.headers or None  # e.g. the embedded server's access token

        def grpc_call() -> None:
            stub(request.body, timeout=30, metadata=metadata)
        return grpc_call
    if request.protocol != "http":
        raise ValueError(f"unknown protocol {request.protocol!r}")
    import http.client

    connection = http.client.HTTPConnection(request.target, timeout=30)
    headers = dict(request.headers)

    def http_call() -> None:
        connection.request(request.method, request.path, body=request.body or None,
                           headers=headers)
        answer = connection.getresponse()
        text = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"{request.path} → {answer.status}: {text[:300]!r}")
    return http_call


@dataclass(frozen=True)
class _Job:
    request: Request
    requests: int
    warmup: int


def _client_serve(jobs: Any, ready: Any, go: Any, done: Any) -> None:
    while (job := jobs.get()) is not None:
        try:
            call = request_call(job.request)
            for _ in range(job.warmup):
                call()
        except Exception as exc:
            ready.put(repr(exc))
            go.wait()
            done.put(repr(exc))
            continue
        ready.put(None)
        go.wait()
        latencies = []
        error = None
        began = time.perf_counter()
        try:
            for _ in range(job.requests):
                start = time.perf_counter()
                call()
                latencies.append((time.perf_counter() - start) * 1000)
        except Exception as exc:
            error = repr(exc)
        done.put(error or (began, time.perf_counter(), latencies))


class ClientPool:
    """`size` client processes, started once and reused for every run."""

    def __init__(self, *, size: int) -> None:
        context = multiprocessing.get_context("spawn")  # the parent may hold TF's threads
        self._jobs = context.Queue()
        self._ready = context.Queue()
        self._done = context.Queue()
        self._go = context.Event()
        self._processes = [
            context.Process(target=_client_serve, daemon=True,
                            args=(self._jobs, self._ready, self._go, self._done))
            for _ in range(size)
        ]
        for process in self._processes:
            process.start()

    def run(self, *, request: Request, concurrency: int, requests: int,
            warmup: int = 5) -> LoadResult:
        """`requests` answered requests, split evenly over `concurrency` clients."""
        if not 1 <= concurrency <= len(self._processes) or requests % concurrency:
            raise ValueError("need 1..size clients and an equal share of requests for each")
        self._go.clear()
        for _ in range(concurrency):
            self._jobs.put(_Job(request, requests // concurrency, warmup))
        problems = [p for p in (self._get(self._ready) for _ in range(concurrency)) if p]
        self._go.set()
        answers = [self._get(self._done) for _ in range(concurrency)]
        problems += [a for a in answers if isinstance(a, str)]
        if problems:
            raise RuntimeError(f"{len(problems)} client(s) failed: {problems[0]}")
        began = min(a[0] for a in answers)
        ended = max(a[1] for a in answers)
        return LoadResult([x for a in answers for x in a[2]], ended - began)

    def _get(self, source: Any) -> Any:
        deadline = time.monotonic() + JOB_SECONDS
        while True:
            try:
                return source.get(timeout=1.0)
            except queue.Empty:
                dead = [p for p in self._processes if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"a client process exited ({dead[0].exitcode})") from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no client answered in {JOB_SECONDS:.0f} s") from None

    def cpu_seconds(self) -> float:
        """CPU seconds so far of every client process."""
        return sum(process_seconds(p.pid) for p in self._processes if p.pid is not None)

    def close(self) -> None:
        for _ in self._processes:
            self._jobs.put(None)
        for process in self._processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()

