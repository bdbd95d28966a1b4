"""The profiler service on the gRPC port: TensorFlow's own client and TensorBoard's capture-profile
(its profile plugin, xprof) collect a trace of a model server process, the access token and
--enable_profiler hold, and a confined server writes traces only under its --profiler_write_root."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving.access import channel_with_token
from serving.config import single_model_config
from serving.profiler import XSpace, profile_trace
from serving.server import ModelServer
from serving.tensors import to_proto
from tests.serving.test_serving_cli import free_port, launch, stop, wait_ready

TOKEN = "profiler-test-token"


@contextmanager
def traffic(target: str, token: str = "") -> Iterator[None]:
    """Predicts in a loop while a trace runs, so it has session runs to show: the trace starts
    once answers flow (on a busy machine the first can take longer than a short trace)."""
    done, flowing = threading.Event(), threading.Event()

    def loop() -> None:
        request = predict_pb2.PredictRequest(model_spec={"name": "default"})
        request.inputs["x"].CopyFrom(to_proto(np.array([1.0], dtype=np.float32)))
        with grpc.insecure_channel(target) as plain:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(
                channel_with_token(channel=plain, token=token))
            while not done.is_set():
                stub.Predict(request, 30)
                flowing.set()

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        assert flowing.wait(timeout=60), "no prediction answered within 60 s"
        yield
    finally:
        done.set()
        thread.join()


def trace_events(path: Path) -> int:
    space = XSpace.FromString(path.read_bytes())
    return sum(len(line.events) for plane in space.planes for line in plane.lines)


@pytest.mark.slow
def test_tf_client_traces_a_model_server_process(model_base: Path, tmp_path: Path) -> None:
    grpc_port, rest_port = free_port(), free_port()
    process = launch(f"--port={grpc_port}", f"--rest_api_port={rest_port}", "--host=127.0.0.1",
                     "--model_name=default", f"--model_base_path={model_base / 'half_plus_two'}")
    try:
        wait_ready(process, f"http://127.0.0.1:{rest_port}/v1/models/default")
        logdir = tmp_path / "logdir"
        with traffic(f"127.0.0.1:{grpc_port}"):
            tf.profiler.experimental.client.trace(f"grpc://127.0.0.1:{grpc_port}", str(logdir),
                                                  1000)
        (written,) = logdir.glob("plugins/profile/*/*.xplane.pb")
        assert written.name == f"127.0.0.1_{grpc_port}.xplane.pb"
        assert trace_events(written) > 0
    finally:
        assert stop(process) == 0


@pytest.mark.slow
def test_tensorboard_capture_profile_traces_a_model_server_process(
    model_base: Path, tmp_path: Path
) -> None:
    """As an operator does it: TensorBoard with its profile plugin, "Capture profile" pointed at
    the model server's gRPC port, then the trace read back in TensorBoard's trace viewer."""
    grpc_port, rest_port, board_port = free_port(), free_port(), free_port()
    logdir = tmp_path / "board"
    logdir.mkdir()
    server = launch(f"--port={grpc_port}", f"--rest_api_port={rest_port}", "--host=127.0.0.1",
                    "--model_name=default", f"--model_base_path={model_base / 'half_plus_two'}")
    board = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
         "--port", str(board_port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    plugin = f"http://127.0.0.1:{board_port}/data/plugin/profile"
    try:
        wait_ready(server, f"http://127.0.0.1:{rest_port}/v1/models/default")
        wait_ready(board, f"http://127.0.0.1:{board_port}/data/plugins_listing")
        listing = requests.get(f"http://127.0.0.1:{board_port}/data/plugins_listing", timeout=10)
        assert "profile" in listing.json()
        with traffic(f"127.0.0.1:{grpc_port}"):
            # The query the plugin's "Capture profile" dialog sends.
            captured = requests.get(f"{plugin}/capture_profile", timeout=120, params={
                "service_addr": f"127.0.0.1:{grpc_port}", "is_tpu_name": "false",
                "duration": 1000, "num_retry": 0, "worker_list": "", "delay": 0,
                "host_tracer_level": 2, "device_tracer_level": 1, "python_tracer_level": 0,
            })
        assert captured.status_code == 200, captured.text
        assert "error" not in captured.json(), captured.json()
        (written,) = logdir.glob("plugins/profile/*/*.xplane.pb")
        assert written.name == f"127.0.0.1_{grpc_port}.xplane.pb"
        assert trace_events(written) > 0
        run = written.parent.name
        assert run in requests.get(f"{plugin}/runs", timeout=30).json()
        trace = requests.get(f"{plugin}/data", timeout=120, params={
            "run": run, "tag": "trace_viewer", "host": written.name.removesuffix(".xplane.pb")})
        assert trace.status_code == 200, trace.text
        assert any(event.get("ph") == "X" for event in trace.json()["traceEvents"])
    finally:
        board.terminate()
        board.wait(timeout=30)
        assert stop(server) == 0


@pytest.mark.slow
def test_confined_server_writes_traces_only_under_its_write_root(
    model_base: Path, tmp_path: Path
) -> None:
    grpc_port, rest_port = free_port(), free_port()
    root = tmp_path / "traces"
    process = launch(f"--port={grpc_port}", f"--rest_api_port={rest_port}", "--host=127.0.0.1",
                     "--model_name=default", f"--model_base_path={model_base / 'half_plus_two'}",
                     f"--confine_read_paths={model_base}", f"--profiler_write_root={root}")
    try:
        wait_ready(process, f"http://127.0.0.1:{rest_port}/v1/models/default")
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            with traffic(f"127.0.0.1:{grpc_port}"):
                written = profile_trace(channel=channel, logdir=str(root / "run"),
                                        duration_ms=500, host="served")
            assert written.is_file() and trace_events(written) > 0
            assert written.parent.parent == root / "run" / "plugins" / "profile"
            with pytest.raises(grpc.RpcError) as refused:
                profile_trace(channel=channel, logdir=str(tmp_path / "elsewhere"),
                              duration_ms=100, host="served")
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            with pytest.raises(grpc.RpcError) as escaped:
                profile_trace(channel=channel, logdir=f"{root}/../elsewhere", duration_ms=100,
                              host="served")
            assert escaped.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert not (tmp_path / "elsewhere").exists()
    finally:
        assert stop(process) == 0


def test_profiler_needs_the_access_token(
    start_server: Callable[..., ModelServer], model_base: Path, tmp_path: Path
) -> None:
    server = start_server(
        config=single_model_config(name="default", base_path=str(model_base / "half_plus_two")),
        access_token=TOKEN,
    )
    with grpc.insecure_channel(server.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as denied:
            profile_trace(channel=channel, logdir=str(tmp_path / "no"), duration_ms=100,
                          host="h")
        assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert not (tmp_path / "no").exists()
        with traffic(server.grpc_target, token=TOKEN):
            written = profile_trace(channel=channel_with_token(channel=channel, token=TOKEN),
                                    logdir=str(tmp_path / "yes"), duration_ms=300, host="h")
        assert trace_events(written) > 0


def test_enable_profiler_false_leaves_the_service_out(
    start_server: Callable[..., ModelServer], model_base: Path, tmp_path: Path
) -> None:
    server = start_server(
        config=single_model_config(name="default", base_path=str(model_base / "half_plus_two")),
        enable_profiler=False,
    )
    with grpc.insecure_channel(server.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as missing:
            profile_trace(channel=channel, logdir=str(tmp_path), duration_ms=100, host="h")
        assert missing.value.code() == grpc.StatusCode.UNIMPLEMENTED
