"""The REST port's HTTP handling, over real sockets: the event loop, keep-alive, chunked bodies,
`Expect: 100-continue`, CORS, and predicts that wait for a batch without holding a thread."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from serving.batching import BatchingRunner
from serving.config import BatchingOptions, single_model_config
from serving.http_server import RestServer
from serving.rest_api import RestApi
from serving.server import ModelServer

Start = Callable[..., ModelServer]
SLOW = 10_000_000  # a batch timeout no test waits for: only a full batch may run
PREDICT = "/v1/models/hp2:predict"


def serve(model_base: Path, start_server: Start, **options: object) -> ModelServer:
    config = single_model_config(name="hp2", base_path=str(model_base / "half_plus_two"))
    return start_server(config=config, **options)


def connect(server: ModelServer) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=30)


def body_of(values: list[float]) -> bytes:
    return json.dumps({"instances": values}).encode()


@pytest.fixture
def one_thread_rest(model_base: Path, start_server: Start) -> Iterator[tuple[ModelServer, str]]:
    """A batching server whose REST port has a single pool thread."""
    server = serve(model_base, start_server, rest_api_port=None, batching=BatchingOptions(
        max_batch_size=8, batch_timeout_micros=SLOW, num_batch_threads=1))
    rest = RestServer(api=RestApi(inference=server.inference), host="127.0.0.1", port=0,
                      threads=1)
    rest.start()
    yield server, f"http://127.0.0.1:{rest.port}"
    rest.stop()


def test_waiting_predicts_hold_no_thread(one_thread_rest: tuple[ModelServer, str]) -> None:
    # Eight requests of one row each fill the batch only if all eight wait at once: with the
    # pool's one thread blocked on the first, the batch would never fill (its timeout is SLOW).
    server, url = one_thread_rest
    barrier = threading.Barrier(8)

    def call(value: float) -> list[float]:
        barrier.wait()
        reply = requests.post(url + PREDICT, data=body_of([value]), timeout=60)
        assert reply.status_code == 200, reply.text
        return list(reply.json()["predictions"])

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(call, [float(v) for v in range(8)]))
    assert answers == [[0.5 * v + 2] for v in range(8)]
    assert server.model_runs(name="hp2", version=123) == 1


def test_keep_alive_answers_several_requests_on_one_connection(
    model_base: Path, start_server: Start
) -> None:
    server = serve(model_base, start_server)
    connection = connect(server)
    answers, sockets = [], set()
    for value in (1.0, 2.0, 3.0):
        connection.request("POST", PREDICT, body=body_of([value]),
                           headers={"Content-Type": "application/json"})
        answers.append(json.loads(connection.getresponse().read()))
        sockets.add(connection.sock.getsockname()[1])  # a reconnect would get a new port
    connection.close()
    assert answers == [{"predictions": [2.5]}, {"predictions": [3.0]}, {"predictions": [3.5]}]
    assert len(sockets) == 1


def test_chunked_request_bodies_are_read_whole(model_base: Path, start_server: Start) -> None:
    server = serve(model_base, start_server)
    data = body_of([1.0, 2.0])
    chunks = (data[:7], data[7:])
    connection = connect(server)
    connection.request("POST", PREDICT, body=iter(chunks), encode_chunked=True,
                       headers={"Transfer-Encoding": "chunked"})
    reply = connection.getresponse()
    assert (reply.status, json.loads(reply.read())) == (200, {"predictions": [2.5, 3.0]})


def test_expect_100_continue_is_answered_before_the_body(
    model_base: Path, start_server: Start
) -> None:
    server = serve(model_base, start_server)
    data = body_of([4.0])
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=30) as sock:
        sock.sendall(
            f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(data)
        answer = b""
        while not answer.endswith(b"}"):
            answer += sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.split(b"\r\n\r\n", 1)[1].strip() == b'{\n    "predictions": [4.0\n    ]\n}'


def test_bodies_too_large_for_the_loop_are_answered_from_the_pool(
    model_base: Path, start_server: Start
) -> None:
    server = serve(model_base, start_server)
    values = [float(v % 7) for v in range(20_000)]  # about 100 kB of JSON
    reply = requests.post(server.rest_url + PREDICT, data=body_of(values), timeout=60)
    assert reply.status_code == 200
    assert reply.json()["predictions"] == [0.5 * v + 2 for v in values]


def test_a_full_batch_queue_answers_unavailable(model_base: Path, start_server: Start) -> None:
    # The first task waits in an open batch; two rows do not fit beside it, which closes that
    # batch, and a second batch would exceed max_enqueued_batches: refused at once, while the
    # closed batch runs.
    server = serve(model_base, start_server, batching=BatchingOptions(
        max_batch_size=2, batch_timeout_micros=SLOW, max_enqueued_batches=1,
        num_batch_threads=1))
    runner = server.inference.runner
    assert isinstance(runner, BatchingRunner)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(requests.post, server.rest_url + PREDICT, data=body_of([1.0]),
                            timeout=60)
        deadline = time.monotonic() + 30
        while runner.pending() < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        refused = requests.post(server.rest_url + PREDICT, data=body_of([2.0, 3.0]), timeout=60)
        assert refused.status_code == 503
        assert "batch scheduling queue" in refused.json()["error"]
        # Answered now, not after the SLOW timeout: the refusal woke the batch thread.
        assert first.result(timeout=5).json() == {"predictions": [2.5]}


def test_cors(model_base: Path, start_server: Start) -> None:
    server = serve(model_base, start_server, rest_api_enable_cors_support=True)
    reply = requests.post(server.rest_url + PREDICT, data=body_of([1.0]), timeout=60)
    assert reply.headers["Access-Control-Allow-Origin"] == "*"
    preflight = requests.options(server.rest_url + PREDICT,
                                 headers={"Origin": "http://example.com"}, timeout=60)
    assert (preflight.status_code, preflight.content) == (200, b"")
    assert preflight.headers["Access-Control-Allow-Methods"] == "POST, GET"
    refused = requests.options(server.rest_url + PREDICT, timeout=60)
    assert refused.status_code == 400
    assert refused.json() == {"error": "Origin header is missing in CORS preflight"}


def test_paths_outside_v1_are_html_not_found(model_base: Path, start_server: Start) -> None:
    server = serve(model_base, start_server)
    reply = requests.get(server.rest_url + "/metrics", timeout=60)
    assert reply.status_code == 404
    assert reply.headers["Content-Type"].startswith("text/html")


def test_other_methods_are_malformed_requests(model_base: Path, start_server: Start) -> None:
    server = serve(model_base, start_server)
    reply = requests.put(server.rest_url + PREDICT, data=body_of([1.0]), timeout=60)
    assert reply.status_code == 400
    assert reply.json() == {"error": f"Malformed request: PUT {PREDICT}"}
