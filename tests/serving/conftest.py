"""Fixtures for the serving package: TF Serving's own test models behind a real server.

Every test talks to the server over real gRPC and HTTP on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import requests
from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

from serving.config import BatchingOptions, single_model_config
from serving.server import ModelServer, ServerOptions

ROOT = Path(__file__).resolve().parents[2]
TESTDATA = ROOT / ".." / "shared" / "peer-data" / "tf-serving-testdata"
HALF_PLUS_TWO = "saved_model_half_plus_two_cpu"
HALF_PLUS_THREE = "saved_model_half_plus_three"
TWO_VERSIONS = "saved_model_half_plus_two_2_versions"


def testdata_dir() -> Path:
    """TF Serving's test models; CI must have them, elsewhere their absence skips."""
    if TESTDATA.is_dir():
        return TESTDATA.resolve()
    if os.environ.get("CI"):
        pytest.fail(f"CI needs TF Serving's test models at {TESTDATA}")
    pytest.skip(f"TF Serving's test models not found at {TESTDATA}")


def copy_tree(source: Path, target: Path) -> Path:
    """Copies peer data (read-only on disk) into a writable temporary tree."""
    shutil.copytree(source, target)
    for folder, dirs, files in os.walk(target):
        for name in [*dirs, *files, "."]:
            path = Path(folder) / name
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return target


@pytest.fixture(scope="session")
def testdata() -> Path:
    return testdata_dir()


@pytest.fixture(scope="module")
def model_base(testdata: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model base path holding copies of the three test models."""
    base = tmp_path_factory.mktemp("models")
    copy_tree(testdata / HALF_PLUS_TWO, base / "half_plus_two")
    copy_tree(testdata / HALF_PLUS_THREE, base / "half_plus_three")
    copy_tree(testdata / TWO_VERSIONS, base / "two_versions")
    return base


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def local_options(**overrides: Any) -> ServerOptions:
    values: dict[str, Any] = {
        "grpc_port": 0,
        "rest_api_port": 0,
        "host": "127.0.0.1",
        "file_system_poll_wait_seconds": 0,
    }
    values.update(overrides)
    return ServerOptions(**values)


@pytest.fixture
def start_server() -> Iterator[Callable[..., ModelServer]]:
    """Starts ModelServers on free loopback ports and stops them after the test."""
    started: list[ModelServer] = []

    def start(
        *, config: Any, batching: BatchingOptions | None = None, **options: Any
    ) -> ModelServer:
        server = ModelServer(options=local_options(batching=batching, **options), config=config)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def peer_server(model_base: Path) -> Iterator[ModelServer]:
    """half_plus_two served as "default" (the name in TF Serving's expected metadata)."""
    config = single_model_config(name="default", base_path=str(model_base / "half_plus_two"))
    server = ModelServer(options=local_options(), config=config)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


@pytest.fixture
def channel(peer_server: ModelServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(peer_server.grpc_target) as ch:
        yield ch


@pytest.fixture
def prediction_stub(channel: grpc.Channel) -> Any:
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


@pytest.fixture
def model_stub(channel: grpc.Channel) -> Any:
    return model_service_pb2_grpc.ModelServiceStub(channel)


@dataclass
class Gateway:
    """serving.gateway in a process of its own, in front of `upstream` (standing in for stock
    TF Serving: the same API, and no token of its own)."""

    process: subprocess.Popen[str]
    grpc_target: str
    rest_url: str


GATEWAY_STARTED = re.compile(r"Gateway: gRPC on (\d+), REST on (\d+)")


def gateway_start(*, upstream_grpc: str, upstream_rest: str, token: str,
                  max_age_seconds: float = 30.0, upstream_token_file: Path | None = None,
                  timeout: float = 60.0) -> Gateway:
    env = {**os.environ, "TF_SERVING_ACCESS_TOKEN": token, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "serving.gateway", "--port", "0", "--rest_api_port", "0",
         "--rest_api_host", "127.0.0.1", "--upstream_grpc", upstream_grpc,
         "--upstream_rest", upstream_rest,
         "--platform_access_max_age_seconds", str(max_age_seconds),
         *(["--upstream_access_token_file", str(upstream_token_file)]
           if upstream_token_file else [])],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        seen.append(line)
        if found := GATEWAY_STARTED.search(line):
            # Its log goes on being written: drain it so the pipe never fills.
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return Gateway(process=process, grpc_target=f"127.0.0.1:{found.group(1)}",
                           rest_url=f"http://127.0.0.1:{found.group(2)}")
    process.kill()
    raise AssertionError(f"the gateway did not start: {''.join(seen)[-3000:]}")


@pytest.fixture
def start_gateway() -> Iterator[Callable[..., Gateway]]:
    started: list[Gateway] = []

    def start(**kwargs: Any) -> Gateway:
        gateway = gateway_start(**kwargs)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.process.terminate()
        try:
            gateway.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            gateway.process.kill()
