"""TF Serving's own test models answer exactly as TF Serving's docs and tests say they do.

The expected values are those of tensorflow_model_server_test.py and
http_rest_api_handler_test.cc; half_plus_two is y = 0.5 * x + 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import requests
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    predict_pb2,
    regression_pb2,
)

from serving.server import ModelServer


def post(http: requests.Session, server: ModelServer, path: str, body: Any) -> requests.Response:
    return http.post(server.rest_url + path, json=body, timeout=30)


def test_rest_predict_row_format(peer_server: ModelServer, http: requests.Session) -> None:
    reply = post(http, peer_server, "/v1/models/default:predict", {"instances": [1.0, 2.0, 5.0]})
    assert reply.status_code == 200
    assert reply.headers["Content-Type"] == "application/json"
    assert reply.json() == {"predictions": [2.5, 3.0, 4.5]}
    # rapidjson's PrettyWriter layout, as tensorflow/serving prints it.
    assert reply.text == '{\n    "predictions": [2.5, 3.0, 4.5\n    ]\n}'
    nested = post(http, peer_server, "/v1/models/default:predict", {"instances": [[1.0], [2.0]]})
    assert nested.json() == {"predictions": [[2.5], [3.0]]}


def test_rest_predict_columnar_format(peer_server: ModelServer, http: requests.Session) -> None:
    reply = post(http, peer_server, "/v1/models/default:predict", {"inputs": [2.0, 3.0, 4.0]})
    assert reply.status_code == 200
    # A single output answers with the bare value, not an object keyed by output name.
    assert reply.json() == {"outputs": [3.0, 3.5, 4.0]}
    named = post(
        http,
        peer_server,
        "/v1/models/default:predict",
        {"signature_name": "serving_default", "inputs": {"x": [[3.0], [4.0]]}},
    )
    assert named.json() == {"outputs": [[3.5], [4.0]]}


def test_rest_predict_named_instances_and_signature(
    peer_server: ModelServer, http: requests.Session
) -> None:
    reply = post(
        http,
        peer_server,
        "/v1/models/default/versions/123:predict",
        {"signature_name": "serving_default", "instances": [{"x": [3.0]}, {"x": [4.0]}]},
    )
    assert reply.json() == {"predictions": [[3.5], [4.0]]}


def test_rest_classify_and_regress(peer_server: ModelServer, http: requests.Session) -> None:
    classify = post(
        http,
        peer_server,
        "/v1/models/default:classify",
        {"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}]},
    )
    assert classify.status_code == 200
    assert classify.json() == {"results": [[["", 2.5]]]}
    regress = post(
        http,
        peer_server,
        "/v1/models/default:regress",
        {"signature_name": "regress_x_to_y", "examples": [{"x": 1.0}]},
    )
    assert regress.json() == {"results": [2.5]}
    # The values TF Serving's own tests expect.
    assert post(
        http,
        peer_server,
        "/v1/models/default:regress",
        {"signature_name": "regress_x_to_y", "examples": [{"x": 80.0}, {"x": 2.0}]},
    ).json() == {"results": [42.0, 3.0]}
    assert post(
        http,
        peer_server,
        "/v1/models/default:classify",
        {"signature_name": "classify_x_to_y", "examples": [{"x": 20.0}]},
    ).json() == {"results": [[["", 12.0]]]}


def test_rest_classify_with_context(peer_server: ModelServer, http: requests.Session) -> None:
    reply = post(
        http,
        peer_server,
        "/v1/models/default:regress",
        {"signature_name": "regress_x_to_y", "context": {"x": 4.0}, "examples": [{}, {}]},
    )
    assert reply.json() == {"results": [4.0, 4.0]}


def test_rest_status(peer_server: ModelServer, http: requests.Session) -> None:
    expected = {
        "model_version_status": [
            {
                "version": "123",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    assert http.get(peer_server.rest_url + "/v1/models/default", timeout=30).json() == expected
    versioned = http.get(peer_server.rest_url + "/v1/models/default/versions/123", timeout=30)
    assert versioned.json() == expected


def test_rest_metadata_matches_tf_serving(
    peer_server: ModelServer, http: requests.Session, testdata: Path
) -> None:
    reply = http.get(peer_server.rest_url + "/v1/models/default/metadata", timeout=30)
    assert reply.status_code == 200
    expected = json.loads((testdata / "half_plus_two_model_metadata.json").read_text())
    assert reply.json() == expected


def test_grpc_predict(peer_server: ModelServer, prediction_stub: Any) -> None:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "default"
    request.model_spec.signature_name = "serving_default"
    request.inputs["x"].dtype = types_pb2.DT_FLOAT
    request.inputs["x"].float_val.append(2.0)
    request.inputs["x"].tensor_shape.dim.add().size = 1
    request.output_filter.append("y")
    result = prediction_stub.Predict(request, 30)
    assert result.outputs["y"].dtype == types_pb2.DT_FLOAT
    assert list(result.outputs["y"].float_val) == [3.0]  # AsProtoField, not tensor_content
    assert result.model_spec.name == "default"
    assert result.model_spec.signature_name == "serving_default"
    assert result.model_spec.version.value == 123


def test_grpc_classify_and_regress(peer_server: ModelServer, prediction_stub: Any) -> None:
    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name = "default"
    classify.model_spec.signature_name = "classify_x_to_y"
    classify.input.example_list.examples.add().features.feature["x"].float_list.value.append(2.0)
    result = prediction_stub.Classify(classify, 30)
    assert [c.score for c in result.result.classifications[0].classes] == [3.0]
    assert result.model_spec.signature_name == "classify_x_to_y"
    assert result.model_spec.version.value == 123

    regress = regression_pb2.RegressionRequest()
    regress.model_spec.name = "default"
    regress.model_spec.signature_name = "regress_x_to_y"
    regress.input.example_list.examples.add().features.feature["x"].float_list.value.append(2.0)
    answer = prediction_stub.Regress(regress, 30)
    assert [r.value for r in answer.result.regressions] == [3.0]
    assert answer.model_spec.version.value == 123


def test_grpc_metadata_and_status(
    peer_server: ModelServer, prediction_stub: Any, model_stub: Any
) -> None:
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "default"
    request.metadata_field.append("signature_def")
    result = prediction_stub.GetModelMetadata(request, 30)
    assert result.model_spec.name == "default"
    assert result.model_spec.version.value == 123
    assert list(result.metadata) == ["signature_def"]
    signatures = get_model_metadata_pb2.SignatureDefMap()
    result.metadata["signature_def"].Unpack(signatures)
    assert set(signatures.signature_def) == {
        "serving_default",
        "classify_x_to_y",
        "regress_x_to_y",
        "regress_x_to_y2",
        "regress_x2_to_y3",
    }

    status = model_stub.GetModelStatus(
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "default"}), 30
    )
    assert [v.version for v in status.model_version_status] == [123]
    assert status.model_version_status[0].state == get_model_status_pb2.ModelVersionStatus.AVAILABLE
    assert status.model_version_status[0].status.error_code == 0
