"""Server-side batching: concurrent requests share one model run, each gets its own rows."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import requests
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving.config import BatchingOptions, single_model_config
from serving.server import ModelServer
from serving.tensors import to_proto

Start = Callable[..., ModelServer]
SLOW = 10_000_000  # a batch timeout no test waits for: only a full batch may run


def half_plus_two(values: list[float]) -> list[float]:
    return [0.5 * v + 2 for v in values]


def rest_predict(server: ModelServer, values: list[float]) -> list[float]:
    reply = requests.post(
        server.rest_url + "/v1/models/hp2:predict", json={"instances": values}, timeout=60
    )
    assert reply.status_code == 200, reply.text
    return [float(v) for v in reply.json()["predictions"]]


def grpc_predict(server: ModelServer, values: list[float]) -> list[float]:
    request = predict_pb2.PredictRequest(model_spec={"name": "hp2"})
    request.inputs["x"].CopyFrom(to_proto(np.array(values, dtype=np.float32)))
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return list(stub.Predict(request, 60).outputs["y"].float_val)


def serve(model_base: Path, start_server: Start, batching: BatchingOptions | None) -> ModelServer:
    config = single_model_config(name="hp2", base_path=str(model_base / "half_plus_two"))
    return start_server(config=config, batching=batching)


def test_concurrent_requests_share_one_run(model_base: Path, start_server: Start) -> None:
    options = BatchingOptions(max_batch_size=8, batch_timeout_micros=SLOW, num_batch_threads=1)
    server = serve(model_base, start_server, options)
    # Six callers, 8 rows in all; every caller's values are distinct.
    requests_rows = [[1.0], [2.0, 3.0], [4.0], [5.0, 6.0], [7.0], [8.0]]
    barrier = threading.Barrier(len(requests_rows))

    def call(index: int) -> list[float]:
        barrier.wait()
        send = rest_predict if index % 2 else grpc_predict
        return send(server, requests_rows[index])

    with ThreadPoolExecutor(len(requests_rows)) as pool:
        answers = list(pool.map(call, range(len(requests_rows))))
    assert answers == [half_plus_two(rows) for rows in requests_rows]
    assert server.model_runs(name="hp2", version=123) == 1


def test_a_partial_batch_runs_after_the_timeout(model_base: Path, start_server: Start) -> None:
    options = BatchingOptions(
        max_batch_size=64, batch_timeout_micros=20_000, allowed_batch_sizes=(4, 64)
    )
    server = serve(model_base, start_server, options)
    # Three rows are padded to the allowed size 4 for the run, then trimmed off again.
    assert rest_predict(server, [1.0, 2.0, 3.0]) == [2.5, 3.0, 3.5]
    assert server.model_runs(name="hp2", version=123) == 1


def test_a_task_larger_than_a_batch_is_refused(model_base: Path, start_server: Start) -> None:
    server = serve(model_base, start_server, BatchingOptions(max_batch_size=8))
    reply = requests.post(
        server.rest_url + "/v1/models/hp2:predict", json={"instances": [1.0] * 9}, timeout=60
    )
    assert reply.status_code == 400
    assert reply.json() == {"error": "Task size 9 is larger than maximum input batch size 8"}


def test_batching_off_runs_every_request(model_base: Path, start_server: Start) -> None:
    server = serve(model_base, start_server, None)
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda v: rest_predict(server, [v]), [1.0, 2.0, 3.0, 4.0]))
    assert answers == [[2.5], [3.0], [3.5], [4.0]]
    assert server.model_runs(name="hp2", version=123) == 4


def test_classify_and_regress_are_batched_too(model_base: Path, start_server: Start) -> None:
    options = BatchingOptions(max_batch_size=3, batch_timeout_micros=SLOW)
    server = serve(model_base, start_server, options)
    barrier = threading.Barrier(3)

    def regress(x: float) -> list[float]:
        barrier.wait()
        reply = requests.post(
            server.rest_url + "/v1/models/hp2:regress",
            json={"signature_name": "regress_x_to_y", "examples": [{"x": x}]},
            timeout=60,
        )
        return [float(v) for v in reply.json()["results"]]

    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(regress, [2.0, 4.0, 6.0]))
    assert answers == [[3.0], [4.0], [5.0]]
    assert server.model_runs(name="hp2", version=123) == 1
