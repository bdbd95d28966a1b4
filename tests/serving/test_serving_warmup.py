"""SavedModel warm-up: assets.extra/tf_serving_warmup_requests replayed before a version is
AVAILABLE, and a bad file failing the load with TF Serving's error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tensorflow as tf
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    prediction_log_pb2,
)

from serving.config import single_model_config
from serving.errors import ServingError
from serving.metrics import DEFAULT_PATH, MonitoringOptions
from serving.server import ModelServer
from serving.tensors import to_proto
from serving.warmup import MAX_RECORDS
from tests.serving.conftest import HALF_PLUS_TWO, copy_tree

VERSION = "00000123"


def warm_model(testdata: Path, target: Path, records: list[bytes] | bytes) -> Path:
    """half_plus_two with a warm-up file: TFRecords of `records`, or these raw bytes."""
    copy_tree(testdata / HALF_PLUS_TWO, target)
    extra = target / VERSION / "assets.extra"
    extra.mkdir()
    path = extra / "tf_serving_warmup_requests"
    if isinstance(records, bytes):
        path.write_bytes(records)
    else:
        with tf.io.TFRecordWriter(str(path)) as writer:
            for record in records:
                writer.write(record)
    return target


def predict_record(values: list[float]) -> bytes:
    entry = prediction_log_pb2.PredictionLog()
    request = entry.predict_log.request
    request.model_spec.name = "ignored"
    request.inputs["x"].CopyFrom(to_proto(np.array(values, dtype=np.float32)))
    return entry.SerializeToString()


def samples(server: ModelServer) -> dict[tuple[str, frozenset], float]:
    text = requests.get(server.rest_url + DEFAULT_PATH, timeout=10).text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_warmup_is_replayed_before_the_version_serves(
    start_server: Callable[..., ModelServer], testdata: Path, tmp_path: Path
) -> None:
    base = warm_model(testdata, tmp_path / "warm", [predict_record([1.0]),
                                                    predict_record([2.0, 3.0])])
    server = start_server(config=single_model_config(name="warm", base_path=str(base)),
                          num_request_iterations_for_warmup=3,
                          monitoring=MonitoringOptions(prometheus=True))
    # Two records, three times each, all before any client asked anything.
    assert server.model_runs(name="warm", version=123) == 6
    found = samples(server)
    runtime = (":tensorflow:serving:runtime_latency_count",
               frozenset({"model_name": "warm", "API": "Predict", "runtime": "TF1"}.items()))
    assert found[runtime] == 6
    warmup = (":tensorflow:serving:model_warmup_latency_count",
              frozenset({"model_path": str(base / VERSION), "status": "OK"}.items()))
    assert found[warmup] == 1


def test_warmup_can_be_turned_off(start_server: Callable[..., ModelServer], testdata: Path,
                                  tmp_path: Path) -> None:
    base = warm_model(testdata, tmp_path / "cold", b"not a tfrecord at all")
    server = start_server(config=single_model_config(name="cold", base_path=str(base)),
                          enable_model_warmup=False)
    assert server.model_runs(name="cold", version=123) == 0


@pytest.mark.parametrize(
    ("records", "code", "message"),
    [
        (b"not a tfrecord at all", grpc.StatusCode.DATA_LOSS,
         "Please verify your warmup data is in TFRecord format."),
        ([b"\xff\xff\xff"], grpc.StatusCode.INVALID_ARGUMENT, "Failed to parse warmup record"),
        ([predict_record([1.0])] * (MAX_RECORDS + 1), grpc.StatusCode.INVALID_ARGUMENT,
         f"Number of warmup records exceeds the maximum ({MAX_RECORDS})"),
    ],
)
def test_a_bad_warmup_file_fails_the_load(
    start_server: Callable[..., ModelServer], model_base: Path, testdata: Path, tmp_path: Path,
    records: list[bytes] | bytes, code: grpc.StatusCode, message: str,
) -> None:
    server = start_server(config=single_model_config(
        name="hp2", base_path=str(model_base / "half_plus_two")))
    base = warm_model(testdata, tmp_path / "bad", records)
    config = single_model_config(name="bad", base_path=str(base))
    config.model_config_list.config.add().CopyFrom(
        single_model_config(name="hp2", base_path=str(model_base / "half_plus_two"))
        .model_config_list.config[0])
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        with pytest.raises(grpc.RpcError) as failed:
            stub.HandleReloadConfigRequest(
                model_management_pb2.ReloadConfigRequest(config=config), 120)
        assert message in (failed.value.details() or "")
        status = stub.GetModelStatus(
            get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "bad"}), 30)
    (version,) = status.model_version_status
    assert version.state == get_model_status_pb2.ModelVersionStatus.State.END
    assert version.status.error_code == code.value[0]
    assert message in version.status.error_message


def test_a_bad_warmup_file_fails_start_up(start_server: Callable[..., ModelServer],
                                          testdata: Path, tmp_path: Path) -> None:
    base = warm_model(testdata, tmp_path / "bad", b"garbage that is not a TFRecord")
    with pytest.raises(ServingError, match="TFRecord format"):
        start_server(config=single_model_config(name="bad", base_path=str(base)))
