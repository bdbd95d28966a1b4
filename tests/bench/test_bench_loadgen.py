"""The closed-loop load generator answers exactly the requests asked for, or fails loudly."""

import threading

import pytest

from bench.loadgen import load_run


def test_every_request_is_sent_once_and_timed() -> None:
    lock = threading.Lock()
    clients: list[int] = []
    calls: list[int] = []

    def make_call():
        with lock:
            clients.append(len(clients))
        me = clients[-1]

        def call() -> None:
            with lock:
                calls.append(me)
        return call

    result = load_run(make_call=make_call, concurrency=4, requests=40, warmup=2)
    assert len(clients) == 4
    assert len(calls) == 40 + 4 * 2  # warm-up calls are made but not counted
    assert len(result.latencies_ms) == 40
    assert result.throughput > 0 and result.p50 <= result.p99


def test_a_failing_client_fails_the_run() -> None:
    def make_call():
        def call() -> None:
            raise ConnectionError("server went away")
        return call

    with pytest.raises(RuntimeError, match="server went away"):
        load_run(make_call=make_call, concurrency=2, requests=4, warmup=0)
    with pytest.raises(RuntimeError, match="server went away"):
        load_run(make_call=make_call, concurrency=2, requests=4, warmup=1)
    with pytest.raises(ValueError, match="one request per thread"):
        load_run(make_call=make_call, concurrency=3, requests=2)
