"""`python -m serving` started with tensorflow_model_server's own flags."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving.flags import options_from_args
from serving.flags import parser as flag_parser
from serving.tensors import to_proto

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(*flags: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen(
        [sys.executable, "-m", "serving", *flags],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_ready(process: subprocess.Popen[str], url: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = process.stdout.read() if process.stdout else ""
            raise AssertionError(f"server exited with {process.returncode}:\n{output}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} never became ready")


def stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        output = process.stdout.read() if process.stdout else ""
        raise AssertionError(f"server ignored SIGTERM:\n{output}") from None


def grpc_predict(port: int, name: str, value: float) -> tuple[float, int]:
    request = predict_pb2.PredictRequest(model_spec={"name": name})
    request.inputs["x"].CopyFrom(to_proto(np.array([value], dtype=np.float32)))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, 30)
    return reply.outputs["y"].float_val[0], reply.model_spec.version.value


@pytest.fixture(scope="module")
def processes(model_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Two servers started together (TensorFlow's import dominates their start-up)."""
    folder = tmp_path_factory.mktemp("cli")
    config = folder / "models.config"
    config.write_text(
        f'model_config_list {{ config {{ name: "hp3" base_path: "{model_base / "half_plus_three"}" '
        'model_platform: "tensorflow" } }'
    )
    batching = folder / "batching.config"
    batching.write_text("max_batch_size { value: 16 }\nbatch_timeout_micros { value: 1000 }\n")
    monitoring = folder / "monitoring.config"
    monitoring.write_text('prometheus_config { enable: true, path: "/metrics" }\n')
    single = {"grpc": free_port(), "rest": free_port()}
    configured = {"grpc": free_port(), "rest": free_port()}
    started = {
        "single": launch(
            f"--port={single['grpc']}",
            f"--rest_api_port={single['rest']}",
            "--model_name=half",
            f"--model_base_path={model_base / 'half_plus_two'}",
            "--host=127.0.0.1",
        ),
        "configured": launch(
            f"--port={configured['grpc']}",
            f"--rest_api_port={configured['rest']}",
            f"--model_config_file={config}",
            "--model_config_file_poll_wait_seconds=1",
            "--enable_batching",
            f"--batching_parameters_file={batching}",
            "--file_system_poll_wait_seconds=0",
            "--rest_api_timeout_in_ms=5000",
            "--rest_api_num_threads=4",
            "--enable_model_warmup=false",
            f"--monitoring_config_file={monitoring}",
            # Each batch's ops run in the batch thread (TF Serving's small-model tuning).
            "--tensorflow_intra_op_parallelism=1",
            "--tensorflow_inter_op_parallelism=-1",
            "--host=127.0.0.1",
        ),
    }
    yield {
        "procs": started,
        "single": single,
        "configured": configured,
        "config": config,
        "model_base": model_base,
    }
    for process in started.values():
        if process.poll() is None:
            process.kill()
            process.wait()


def test_single_model_flags(processes: dict) -> None:
    ports, process = processes["single"], processes["procs"]["single"]
    rest = f"http://127.0.0.1:{ports['rest']}"
    wait_ready(process, f"{rest}/v1/models/half")
    reply = requests.post(
        f"{rest}/v1/models/half:predict", json={"instances": [1.0, 2.0, 5.0]}, timeout=30
    )
    assert reply.json() == {"predictions": [2.5, 3.0, 4.5]}
    assert grpc_predict(ports["grpc"], "half", 2.0) == (3.0, 123)
    assert stop(process) == 0
    output = process.stdout.read() if process.stdout else ""
    assert "Running gRPC ModelServer at 127.0.0.1:" in output
    assert "Exporting HTTP/REST API at:127.0.0.1:" in output


def test_model_config_file_with_batching_and_config_polling(processes: dict) -> None:
    ports, process = processes["configured"], processes["procs"]["configured"]
    rest = f"http://127.0.0.1:{ports['rest']}"
    wait_ready(process, f"{rest}/v1/models/hp3")
    reply = requests.post(
        f"{rest}/v1/models/hp3:regress",
        json={"signature_name": "tensorflow/serving/regress", "examples": [{"x": 2.0}]},
        timeout=30,
    )
    assert reply.json() == {"results": [4.0]}
    assert grpc_predict(ports["grpc"], "hp3", 2.0) == (4.0, 123)
    exposition = requests.get(f"{rest}/metrics", timeout=10).text  # --monitoring_config_file
    metrics = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(exposition) for sample in family.samples
    }
    latency = ":tensorflow:serving:request_latency_count"
    assert metrics[(latency, (("API", "regress"), ("entrypoint", "REST"),
                              ("model_name", "hp3")))] == 1
    assert metrics[(latency, (("API", "Predict"), ("entrypoint", "GRPC"),
                              ("model_name", "hp3")))] == 1
    assert metrics[(":tensorflow:serving:batching_session:queuing_latency_count",
                    (("thread_pool_name", "batch_threads"),))] >= 1
    # Rewriting the config file adds a model, as --model_config_file_poll_wait_seconds promises.
    base = processes["model_base"]
    processes["config"].write_text(
        "model_config_list { "
        f'config {{ name: "hp3" base_path: "{base / "half_plus_three"}" '
        'model_platform: "tensorflow" } '
        f'config {{ name: "two" base_path: "{base / "two_versions"}" '
        'model_platform: "tensorflow" model_version_policy { all {} } } }'
    )
    wait_ready(process, f"{rest}/v1/models/two/versions/123", timeout=30)
    assert grpc_predict(ports["grpc"], "two", 2.0) == (3.0, 124)
    assert stop(process) == 0


NO_MODEL = "Both server_options.model_base_path and server_options.model_config_file are empty!"
NO_PORT = "At least one of server_options.grpc_port or server_options.grpc_socket_path must be set."
BATCHING_FILE_ALONE = (
    "server_options.batching_parameters_file is set without setting "
    "server_options.enable_batching to true."
)
ALL_PARALLELISM = (
    "Either configure server_options.tensorflow_session_parallelism or "
    "(server_options.tensorflow_intra_op_parallelism, "
    "server_options.tensorflow_inter_op_parallelism) separately. You cannot configure all."
)


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--port=8500"], NO_MODEL),
        (["--port=0", "--model_base_path=/m"], NO_PORT),
        (["--model_base_path=/m", "--batching_parameters_file=/b"], BATCHING_FILE_ALONE),
        (
            [
                "--model_base_path=/m",
                "--tensorflow_session_parallelism=2",
                "--tensorflow_intra_op_parallelism=1",
                "--tensorflow_inter_op_parallelism=1",
            ],
            ALL_PARALLELISM,
        ),
    ],
)
def test_invalid_flags_fail_like_tensorflow_model_server(flags: list[str], error: str) -> None:
    with pytest.raises(ValueError) as failure:
        options_from_args(flag_parser().parse_args(flags))
    assert str(failure.value) == error


def test_flags_map_onto_server_options(tmp_path: Path) -> None:
    batching = tmp_path / "batching.config"
    batching.write_text("max_batch_size { value: 4 }\nnum_batch_threads { value: 2 }\n")
    options, _ = options_from_args(
        flag_parser().parse_args(
            [
                "--port=9000",
                "--model_base_path=/models/m",
                "--enable_batching",
                f"--batching_parameters_file={batching}",
                "--rest_api_enable_cors_support=true",
                "--file_system_poll_wait_seconds=0",
                "--tensorflow_session_parallelism=2",
                "--saved_model_tags=serve,gpu",
                "--enable_profiler=false",
                "--num_tflite_pools=2",
            ]
        )
    )
    # TF Serving's default: all interfaces.
    assert (options.grpc_port, options.rest_api_port) == (9000, None)
    assert options.host == "0.0.0.0"  # noqa: S104
    assert options.batching is not None
    assert (options.batching.max_batch_size, options.batching.num_batch_threads) == (4, 2)
    assert options.rest_api_enable_cors_support
    assert options.file_system_poll_wait_seconds == 0
    assert (options.intra_op_parallelism, options.inter_op_parallelism) == (2, 2)
    assert options.saved_model_tags == ("serve", "gpu")
    assert not options.enable_profiler
    assert options.extra == {"num_tflite_pools": "2"}


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], (0, 0)),
        (["--tensorflow_session_parallelism=3"], (3, 3)),
        # Either per-pool count given: both as given, the session count is not used.
        (["--tensorflow_session_parallelism=3", "--tensorflow_intra_op_parallelism=2"], (2, 0)),
        (["--tensorflow_intra_op_parallelism=1", "--tensorflow_inter_op_parallelism=-1"], (1, -1)),
        # A negative inter-op count alone is not "set" for TF Serving: the session count wins.
        (["--tensorflow_session_parallelism=2", "--tensorflow_inter_op_parallelism=-1"], (2, 2)),
    ],
)
def test_session_parallelism_is_chosen_like_tensorflow_model_server(
    flags: list[str], expected: tuple[int, int]
) -> None:
    options, _ = options_from_args(flag_parser().parse_args(["--model_base_path=/m", *flags]))
    assert (options.intra_op_parallelism, options.inter_op_parallelism) == expected
