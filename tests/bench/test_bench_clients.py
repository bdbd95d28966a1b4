"""Client processes: each sends its share of a run, over real HTTP and gRPC, or fails loudly."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest

from bench.clients import PREDICT_METHOD, ClientPool, Request


class _Counting(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept alive, as the clients expect
    bodies: list[bytes] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.bodies.append(body)
        status = 200 if self.path == "/ok" else 500
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def pool() -> Iterator[ClientPool]:
    clients = ClientPool(size=3)
    yield clients
    clients.close()


@pytest.fixture
def http_target() -> Iterator[str]:
    _Counting.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_clients_send_their_share_and_time_only_the_counted_requests(
    pool: ClientPool, http_target: str
) -> None:
    request = Request("http", http_target, "/ok", b"payload")
    result = pool.run(request=request, concurrency=3, requests=30, warmup=2)
    assert len(result.latencies_ms) == 30
    assert _Counting.bodies == [b"payload"] * (30 + 3 * 2)
    assert result.seconds > 0 and result.p50 <= result.p99


def test_an_error_answer_fails_the_run_and_the_pool_stays_usable(
    pool: ClientPool, http_target: str
) -> None:
    with pytest.raises(RuntimeError, match="500"):
        pool.run(request=Request("http", http_target, "/broken", b"x"), concurrency=2,
                 requests=4, warmup=0)
    result = pool.run(request=Request("http", http_target, "/ok", b"x"), concurrency=2,
                      requests=4, warmup=0)
    assert len(result.latencies_ms) == 4


def test_grpc_clients_call_the_predict_method_with_the_prepared_bytes(pool: ClientPool) -> None:
    seen: list[bytes] = []
    handler = grpc.method_handlers_generic_handler(
        "tensorflow.serving.PredictionService",
        {"Predict": grpc.unary_unary_rpc_method_handler(lambda body, _: seen.append(body) or b"")},
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        result = pool.run(request=Request("grpc", f"127.0.0.1:{port}", PREDICT_METHOD, b"\x0a\x01"),
                          concurrency=2, requests=10, warmup=1)
    finally:
        server.stop(None)
    assert len(result.latencies_ms) == 10 and seen == [b"\x0a\x01"] * 12


def test_uneven_shares_are_refused(pool: ClientPool) -> None:
    with pytest.raises(ValueError, match="equal share"):
        pool.run(request=Request("http", "127.0.0.1:1", "/"), concurrency=3, requests=10)
