"""--monitoring_config_file: TF Serving's metric names and labels on the REST port, counted
after known traffic over real gRPC and REST, and read back with prometheus_client's parser."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving.config import BatchingOptions, single_model_config
from serving.flags import options_from_args
from serving.flags import parser as flag_parser
from serving.metrics import DEFAULT_PATH, MonitoringOptions, monitoring_config_parse
from serving.server import ModelServer
from serving.tensors import to_proto

TOKEN = "metrics-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


def scrape(server: ModelServer, path: str = DEFAULT_PATH) -> dict[tuple[str, frozenset], float]:
    """Every sample of the endpoint, keyed by (name, labels)."""
    reply = requests.get(server.rest_url + path, headers=AUTH, timeout=10)
    assert reply.status_code == 200, reply.text
    assert reply.headers["Content-Type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def grpc_predict(server: ModelServer, *, name: str, alias: str = "x",
                 version: int | None = None) -> grpc.StatusCode:
    request = predict_pb2.PredictRequest(model_spec={"name": name})
    if version is not None:
        request.model_spec.version.value = version
    request.inputs[alias].CopyFrom(to_proto(np.array([1.0, 2.0], dtype=np.float32)))
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            stub.Predict(request, 30, metadata=tuple(AUTH.items()))
        except grpc.RpcError as error:
            return error.code()
    return grpc.StatusCode.OK


def rest_predict(server: ModelServer, *, name: str, body: dict[str, Any]) -> int:
    url = f"{server.rest_url}/v1/models/{name}:predict"
    return requests.post(url, json=body, headers=AUTH, timeout=30).status_code


@pytest.fixture
def monitored(start_server: Callable[..., ModelServer], model_base: Path) -> ModelServer:
    config = single_model_config(name="hp2", base_path=str(model_base / "half_plus_two"))
    return start_server(config=config, access_token=TOKEN,
                        monitoring=MonitoringOptions(prometheus=True))


def test_request_metrics_after_known_traffic(monitored: ModelServer, model_base: Path) -> None:
    ok, failing = 3, 2
    for _ in range(ok):
        assert grpc_predict(monitored, name="hp2") == grpc.StatusCode.OK
    for _ in range(failing):
        assert grpc_predict(monitored, name="hp2", alias="nope") == (
            grpc.StatusCode.INVALID_ARGUMENT)
    assert grpc_predict(monitored, name="missing") == grpc.StatusCode.NOT_FOUND
    assert rest_predict(monitored, name="hp2", body={"instances": [1.0]}) == 200
    assert rest_predict(monitored, name="hp2", body={"inputs": {"nope": [1.0]}}) == 400
    # Every /v1/ call counts over REST, as in TF Serving: a status read and a malformed path.
    assert requests.get(f"{monitored.rest_url}/v1/models/hp2", headers=AUTH,
                        timeout=10).status_code == 200
    assert requests.post(f"{monitored.rest_url}/v1/models/hp2:explain", headers=AUTH,
                         timeout=10).status_code == 400

    samples = scrape(monitored)
    count = ":tensorflow:serving:request_count_total"  # the parser's name for the counter
    assert value(samples, count, model_name="hp2", status="OK") == ok + 2
    assert value(samples, count, model_name="", status="INVALID_ARGUMENT") == 1
    assert value(samples, count, model_name="hp2", status="INVALID_ARGUMENT") == failing + 1
    assert value(samples, count, model_name="missing", status="NOT_FOUND") == 1
    latency = ":tensorflow:serving:request_latency"
    assert value(samples, latency + "_count", model_name="hp2", API="Predict",
                 entrypoint="GRPC") == ok
    # As TF Serving's http_server.cc: the verb as the URL spells it.
    assert value(samples, latency + "_count", model_name="hp2", API="predict",
                 entrypoint="REST") == 1
    assert value(samples, latency + "_bucket", model_name="hp2", API="Predict",
                 entrypoint="GRPC", le="+Inf") == ok
    assert value(samples, latency + "_sum", model_name="hp2", API="Predict",
                 entrypoint="GRPC") > 0
    runtime = ":tensorflow:serving:runtime_latency_count"
    assert value(samples, runtime, model_name="hp2", API="Predict", runtime="TF1") == ok + 1
    model_path = str(model_base / "half_plus_two" / "00000123")
    assert value(samples, ":tensorflow:cc:saved_model:load_attempt_count_total",
                 model_path=model_path, status="success") == 1
    assert value(samples, ":tensorflow:cc:saved_model:load_latency_total",
                 model_path=model_path) > 0


def test_request_metrics_per_version_beside_tf_servings(
    start_server: Callable[..., ModelServer], model_base: Path
) -> None:
    config = single_model_config(name="two", base_path=str(model_base / "two_versions"))
    config.model_config_list.config[0].model_version_policy.all.SetInParent()
    server = start_server(config=config, access_token=TOKEN,
                          monitoring=MonitoringOptions(prometheus=True))
    for version in (123, 123, 124):
        assert grpc_predict(server, name="two", version=version) == grpc.StatusCode.OK
    assert grpc_predict(server, name="two") == grpc.StatusCode.OK  # the latest, 124
    assert grpc_predict(server, name="two", version=124, alias="nope") == (
        grpc.StatusCode.INVALID_ARGUMENT)
    assert grpc_predict(server, name="two", version=7) == grpc.StatusCode.NOT_FOUND
    assert rest_predict(server, name="two/versions/123", body={"instances": [1.0]}) == 200
    assert rest_predict(server, name="two/versions/124", body={"inputs": {"no": [1.0]}}) == 400

    samples = scrape(server)
    count = ":tfplatform:serving:request_count_total"
    assert value(samples, count, model_name="two", model_version="123", status="OK") == 3
    assert value(samples, count, model_name="two", model_version="124", status="OK") == 2
    assert value(samples, count, model_name="two", model_version="124",
                 status="INVALID_ARGUMENT") == 2
    # A request that named no servable version is the model's only, as in TF Serving's.
    assert not any(name == count and ("model_version", "7") in labels
                   for name, labels in samples)
    assert value(samples, ":tensorflow:serving:request_count_total", model_name="two",
                 status="NOT_FOUND") == 1
    latency = ":tfplatform:serving:request_latency"
    assert value(samples, latency + "_count", model_name="two", model_version="123",
                 API="Predict", entrypoint="GRPC") == 2
    assert value(samples, latency + "_count", model_name="two", model_version="123",
                 API="predict", entrypoint="REST") == 1
    assert value(samples, latency + "_bucket", model_name="two", model_version="124",
                 API="Predict", entrypoint="GRPC", le="+Inf") == 2
    # TF Serving's own series are unchanged: per model, all versions together.
    assert value(samples, ":tensorflow:serving:request_count_total", model_name="two",
                 status="OK") == 5
    assert value(samples, ":tensorflow:serving:request_latency_count", model_name="two",
                 API="Predict", entrypoint="GRPC") == 4


def test_exposition_uses_tf_serving_names(monitored: ModelServer) -> None:
    grpc_predict(monitored, name="hp2")
    text = requests.get(monitored.rest_url + DEFAULT_PATH, headers=AUTH, timeout=10).text
    # As TF Serving's exporter writes a counter: no `_total` anywhere.
    assert "# TYPE :tensorflow:serving:request_count counter" in text
    assert ':tensorflow:serving:request_count{model_name="hp2",status="OK"} 1.0' in text
    assert "# TYPE :tensorflow:serving:request_latency histogram" in text
    # Buckets::Exponential(10, 1.8, 33): 32 bounds from 10 µs, then +Inf.
    buckets = [line for line in text.splitlines()
               if line.startswith(":tensorflow:serving:request_latency_bucket{")]
    assert len(buckets) == 33
    assert 'le="10"' in buckets[0] and 'le="32.4"' in buckets[2]
    assert 'le="+Inf"' in buckets[-1]


def test_metrics_need_the_access_token(monitored: ModelServer) -> None:
    assert requests.get(monitored.rest_url + DEFAULT_PATH, timeout=10).status_code == 401
    wrong = {"authorization": "Bearer wrong"}
    assert requests.get(monitored.rest_url + DEFAULT_PATH, headers=wrong,
                        timeout=10).status_code == 401


def test_custom_path_and_disabled_endpoint(start_server: Callable[..., ModelServer],
                                           model_base: Path) -> None:
    config = single_model_config(name="hp2", base_path=str(model_base / "half_plus_two"))
    custom = start_server(config=config, monitoring=MonitoringOptions(prometheus=True,
                                                                      path="/stats"))
    grpc_predict(custom, name="hp2")
    assert scrape(custom, "/stats")
    assert requests.get(custom.rest_url + DEFAULT_PATH, timeout=10).status_code == 404
    plain = start_server(config=config)
    assert requests.get(plain.rest_url + DEFAULT_PATH, timeout=10).status_code == 404


def test_batching_queueing_and_batch_sizes(start_server: Callable[..., ModelServer],
                                           model_base: Path) -> None:
    config = single_model_config(name="hp2", base_path=str(model_base / "half_plus_two"))
    server = start_server(config=config, access_token=TOKEN,
                          batching=BatchingOptions(max_batch_size=8, batch_timeout_micros=1000,
                                                   allowed_batch_sizes=(4, 8)),
                          monitoring=MonitoringOptions(prometheus=True))
    for _ in range(2):
        assert grpc_predict(server, name="hp2") == grpc.StatusCode.OK
    samples = scrape(server)
    pool = {"thread_pool_name": "batch_threads"}
    prefix = ":tensorflow:serving:batching_session:"
    assert value(samples, prefix + "queuing_latency_count", **pool) == 2
    assert value(samples, prefix + "input_batch_size_count", **pool) == 2
    assert value(samples, prefix + "input_batch_size_sum", **pool) == 4  # two rows each
    assert value(samples, prefix + "processed_batch_size_sum", **pool) == 8  # padded to 4
    assert value(samples, prefix + "padding_size_sum", **pool) == 4


def test_monitoring_config_is_tf_servings_text_format(tmp_path: Path) -> None:
    assert monitoring_config_parse("prometheus_config { enable: true }") == MonitoringOptions(
        prometheus=True, path=DEFAULT_PATH)
    assert monitoring_config_parse(
        'prometheus_config { enable: true, path: "/m" }') == MonitoringOptions(True, "/m")
    assert monitoring_config_parse("") == MonitoringOptions(prometheus=False)
    with pytest.raises(ValueError, match="monitoring_config_file"):
        monitoring_config_parse("prometheus_config { enabled: true }")
    config = tmp_path / "monitoring.config"
    config.write_text('prometheus_config { enable: true path: "/metrics" }')
    options, _ = options_from_args(flag_parser().parse_args([
        "--model_base_path=/models/m", f"--monitoring_config_file={config}",
        "--enable_model_warmup=false", "--num_request_iterations_for_warmup=5",
    ]))
    assert options.monitoring == MonitoringOptions(prometheus=True, path="/metrics")
    assert (options.enable_model_warmup, options.num_request_iterations_for_warmup) == (False, 5)
    defaults, _ = options_from_args(flag_parser().parse_args(["--model_base_path=/models/m"]))
    assert (defaults.enable_model_warmup, defaults.num_request_iterations_for_warmup) == (True, 1)
    assert not defaults.monitoring.prometheus
    assert not defaults.extra
