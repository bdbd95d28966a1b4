"""Bad requests get TF Serving's error texts and status codes, never a 500."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    predict_pb2,
)
from tensorflow_serving.config import model_server_config_pb2

from serving import layout
from serving.server import ModelServer, ServerOptions


class Typed(tf.Module):
    """A TF2 model with int, string and matrix inputs, for type, shape and bytes handling."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = tf.Variable([[1.0], [2.0], [3.0]])

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.int32, name="ids"),
            tf.TensorSpec([None], tf.string, name="name"),
        ]
    )
    def typed(self, ids: tf.Tensor, name: tf.Tensor) -> dict[str, tf.Tensor]:
        return {
            "doubled": ids * 2,
            "echo_bytes": name,
            "greeting": tf.strings.join(["hello ", name]),
        }

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="features")])
    def score(self, features: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"score": tf.matmul(features, self.weights)}


@pytest.fixture(scope="module")
def server(model_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    exported = tmp_path_factory.mktemp("typed") / "export"
    module = Typed()
    tf.saved_model.save(
        module, str(exported), signatures={"serving_default": module.typed, "score": module.score}
    )
    layout.publish_version(source=exported, model_base=model_base, model_name="typed")
    config = model_server_config_pb2.ModelServerConfig()
    for name, path in (("default", "half_plus_two"), ("typed", "typed")):
        config.model_config_list.config.add(
            name=name, base_path=str(model_base / path), model_platform="tensorflow"
        )
    options = ServerOptions(grpc_port=0, rest_api_port=0, host="127.0.0.1")
    with ModelServer(options=options, config=config) as running:
        yield running


def call(server: ModelServer, method: str, path: str, body: bytes | None = None) -> Any:
    return requests.request(method, server.rest_url + path, data=body, timeout=30)


PREDICT = "/v1/models/default:predict"
BAD_REQUESTS = [
    ("POST", PREDICT, b"instances = [1, 2]", 400, "JSON Parse error: Invalid value. at offset: 0"),
    ("POST", PREDICT, b"", 400, "JSON Parse error: The document is empty"),
    (
        "POST",
        PREDICT,
        b'{"instances": [1.0,',
        400,
        "JSON Parse error: Invalid value. at offset: 19",
    ),
    (
        "POST",
        PREDICT,
        b'{"instances": [1.0 2.0]}',
        400,
        "JSON Parse error: Missing a comma or ']' after an array element. at offset: 19",
    ),
    ("POST", PREDICT, b"[1, 2]", 400, "JSON Value: [1, 2] Is not object"),
    ("POST", PREDICT, b"{}", 400, "Missing 'inputs' or 'instances' key"),
    (
        "POST",
        PREDICT,
        b'{"signature_name": 100}',
        400,
        'JSON Value: {\n    "signature_name": 100\n} not formatted correctly. '
        "'signature_name' key must be a string value.",
    ),
    (
        "POST",
        PREDICT,
        b'{"instances": [], "inputs": []}',
        400,
        'JSON Value: {\n    "instances": [],\n    "inputs": []\n} Not formatted correctly '
        "expecting only one of 'inputs' or 'instances' keys to exist ",
    ),
    (
        "POST",
        PREDICT,
        b'{"instances": []}',
        400,
        "JSON Value: {\n    \"instances\": []\n} No values in 'instances' array",
    ),
    (
        "POST",
        PREDICT,
        b'{"instances": 1.0}',
        400,
        "JSON Value: {\n    \"instances\": 1.0\n} Expecting 'instances' to be an list/array",
    ),
    (
        "POST",
        PREDICT,
        b'{"instances": ["x", "y"]}',
        400,
        "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: "
        'JSON Value: "x" Type: String is not of expected type: float',
    ),
    (
        "POST",
        PREDICT,
        b'{"inputs": [true]}',
        400,
        "JSON Value: true Type: True is not of expected type: float",
    ),
    (
        "POST",
        PREDICT,
        b'{"instances": [[1.0, 2.0], [3.0]]}',
        400,
        "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: "
        "Expecting tensor size: 2 but got: 1",
    ),
    (
        "POST",
        PREDICT,
        b'{"inputs": [[1.0, 2.0], [3.0]]}',
        400,
        "Encountered list at unexpected size: 1 at level: 1 expected size: 2",
    ),
    (
        "POST",
        PREDICT,
        b'{"inputs": [[1.0], 2.0]}',
        400,
        "JSON Value: 2.0 found at incorrect level: 2 in the JSON DOM. Expected at level: 2",
    ),
    (
        "POST",
        PREDICT,
        b'{"instances": [{"y": 1.0}]}',
        400,
        "Failed to process element: 0 key: y of 'instances' list. Error: INVALID_ARGUMENT: "
        "JSON object: does not have named input: y",
    ),
    (
        "POST",
        PREDICT,
        b'{"signature_name": "nope", "instances": [1.0]}',
        400,
        'Serving signature name: "nope" not found in signature def',
    ),
    (
        "POST",
        "/v1/models/nope:predict",
        b'{"instances": [1.0]}',
        404,
        "Servable not found for request: Latest(nope)",
    ),
    (
        "POST",
        "/v1/models/default/versions/7:predict",
        b'{"instances": [1.0]}',
        404,
        "Servable not found for request: Specific(default, 7)",
    ),
    (
        "POST",
        "/v1/models/default/labels/nope:predict",
        b'{"instances": [1.0]}',
        400,
        "Unrecognized servable version label: nope",
    ),
    (
        "POST",
        "/v1/models/default/versions/99999999999999999999:predict",
        b"{}",
        400,
        "Failed to convert version: 99999999999999999999 to numeric.",
    ),
    (
        "POST",
        "/v1/models/default:explode",
        b"{}",
        400,
        "Malformed request: POST /v1/models/default:explode",
    ),
    ("PUT", PREDICT, b"{}", 400, "Malformed request: PUT /v1/models/default:predict"),
    ("GET", "/v1/models", None, 400, "Missing model name in request."),
    ("GET", "/v1/models/nope", None, 404, "Could not find any versions of model nope"),
    (
        "GET",
        "/v1/models/default/versions/7",
        None,
        404,
        "Could not find version 7 of model default",
    ),
    ("GET", "/v1/models/nope/metadata", None, 404, "Servable not found for request: Latest(nope)"),
    (
        "POST",
        "/v1/models/default:classify",
        b'{"signature_name": "nope", "examples": [{}]}',
        400,
        "No signature was found with the name: nope",
    ),
    (
        "POST",
        "/v1/models/default:regress",
        b'{"examples": []}',
        400,
        "JSON Value: {\n    \"examples\": []\n} 'examples' value is an empty array",
    ),
    (
        "POST",
        "/v1/models/default:regress",
        b'{"signature_name": "regress_x_to_y"}',
        400,
        'JSON Value: {\n    "signature_name": "regress_x_to_y"\n} When method is classify, '
        "key 'examples' is expected and was not found",
    ),
    (
        "POST",
        "/v1/models/default:regress",
        b'{"examples": [{"x": null}]}',
        400,
        "Feature: x has element with unexpected JSON type: Null",
    ),
    (
        "POST",
        "/v1/models/default:regress",
        b'{"examples": [{"x": [1.0, "a"]}]}',
        400,
        "Unexpected element type in feature: x expecting type: float",
    ),
    (
        "POST",
        "/v1/models/typed:predict",
        b'{"instances": [{"ids": 1.5, "name": "a"}]}',
        400,
        "Failed to process element: 0 key: ids of 'instances' list. Error: INVALID_ARGUMENT: "
        "JSON Value: 1.5 Type: Number is not of expected type: int32",
    ),
    (
        "POST",
        "/v1/models/typed:predict",
        b'{"instances": [1]}',
        400,
        "instances is a plain list, but expecting list of objects as multiple input tensors "
        "required as per tensorinfo_map",
    ),
    (
        "POST",
        "/v1/models/typed:predict",
        b'{"inputs": {"ids": [1]}}',
        400,
        "Missing named input: name in 'inputs' object.",
    ),
    (
        "POST",
        "/v1/models/typed:predict",
        b'{"inputs": {"ids": [1], "name": [{"b64": "%"}]}}',
        400,
        "Unable to base64 decode",
    ),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "error"), BAD_REQUESTS)
def test_bad_rest_requests(
    server: ModelServer, method: str, path: str, body: bytes | None, status: int, error: str
) -> None:
    reply = call(server, method, path, body)
    assert reply.status_code == status
    assert reply.headers["Content-Type"] == "application/json"
    assert reply.json() == {"error": error}


def test_model_runtime_errors_are_bad_requests(server: ModelServer) -> None:
    # Shapes are not checked before the run, as in TF Serving: the MatMul op rejects them.
    reply = call(
        server,
        "POST",
        "/v1/models/typed:predict",
        b'{"signature_name": "score", "instances": [[1.0, 2.0]]}',
    )
    assert reply.status_code == 400
    assert "Matrix size-incompatible: In[0]: [1,2], In[1]: [3,1]" in reply.json()["error"]
    fine = call(
        server,
        "POST",
        "/v1/models/typed:predict",
        b'{"signature_name": "score", "instances": [[1.0, 1.0, 1.0]]}',
    )
    assert fine.json() == {"predictions": [[6.0]]}
    # The classify method needs an "inputs" tensor: serving_default has "x".
    classify = call(server, "POST", "/v1/models/default:classify", b'{"examples": [{"x": 1}]}')
    assert classify.status_code == 400
    assert classify.json()["error"].startswith("No classification inputs found in SignatureDef: ")


def test_types_bytes_and_named_outputs(server: ModelServer) -> None:
    hi = base64.b64encode(b"\xffhi").decode()
    rows = call(
        server,
        "POST",
        "/v1/models/typed:predict",
        b'{"instances": [{"ids": 3, "name": "ann"}, {"ids": -1, "name": {"b64": "%s"}}]}'
        % hi.encode(),
    )
    assert rows.status_code == 200, rows.text
    assert rows.json() == {
        "predictions": [
            {
                "doubled": 6,
                "echo_bytes": {"b64": base64.b64encode(b"ann").decode()},
                "greeting": "hello ann",
            },
            {"doubled": -2, "echo_bytes": {"b64": hi}, "greeting": "hello \ufffdhi"},
        ]
    }
    columns = call(
        server,
        "POST",
        "/v1/models/typed:predict",
        b'{"inputs": {"ids": [1, 2], "name": ["a", "b"]}}',
    )
    assert columns.json() == {
        "outputs": {
            "doubled": [2, 4],
            "echo_bytes": [{"b64": "YQ=="}, {"b64": "Yg=="}],
            "greeting": ["hello a", "hello b"],
        }
    }


def test_float_output_formatting(server: ModelServer) -> None:
    # WriteDecimal: shortest float32 text that round-trips, whole numbers with ".0".
    reply = call(server, "POST", PREDICT, b'{"instances": [0.2, 1e7, -3, 1e-9, 2e10]}')
    assert reply.text == '{\n    "predictions": [2.1, 5000002.0, 0.5, 2.0, 1e+10\n    ]\n}'


@pytest.fixture
def stub(server: ModelServer) -> Iterator[Any]:
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    with grpc.insecure_channel(server.grpc_target) as channel:
        yield (
            prediction_service_pb2_grpc.PredictionServiceStub(channel),
            model_service_pb2_grpc.ModelServiceStub(channel),
        )


def grpc_error(call_: Any, request: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as failure:
        call_(request, 30)
    return failure.value.code(), failure.value.details()


def test_bad_grpc_requests(stub: Any) -> None:
    prediction, models = stub
    unknown = predict_pb2.PredictRequest(model_spec={"name": "nope"})
    assert grpc_error(prediction.Predict, unknown) == (
        grpc.StatusCode.NOT_FOUND,
        "Servable not found for request: Latest(nope)",
    )
    assert grpc_error(prediction.Predict, predict_pb2.PredictRequest()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Missing ModelSpec",
    )
    wrong_alias = predict_pb2.PredictRequest(model_spec={"name": "default"})
    wrong_alias.inputs["z"].CopyFrom(tf.make_tensor_proto(np.ones(1, np.float32)))
    assert grpc_error(prediction.Predict, wrong_alias) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Signature input alias: x(feed name: x:0) not found in request and no default value "
        "provided. Inputs expected to be in the request {z}, or default input alias set: ",
    )
    wrong_type = predict_pb2.PredictRequest(model_spec={"name": "default"})
    wrong_type.inputs["x"].CopyFrom(tf.make_tensor_proto(np.ones(1, np.int32)))
    code, message = grpc_error(prediction.Predict, wrong_type)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "int32" in message
    broken = predict_pb2.PredictRequest(model_spec={"name": "default"})
    broken.inputs["x"].dtype = types_pb2.DT_FLOAT
    broken.inputs["x"].tensor_shape.dim.add().size = 2
    broken.inputs["x"].tensor_content = b"\x00"
    assert grpc_error(prediction.Predict, broken) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "tensor parsing error: x",
    )
    metadata = get_model_metadata_pb2.GetModelMetadataRequest(
        model_spec={"name": "default"}, metadata_field=["graph"]
    )
    assert grpc_error(prediction.GetModelMetadata, metadata) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Metadata field graph is not supported",
    )
    status = get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "nope"})
    assert grpc_error(models.GetModelStatus, status) == (
        grpc.StatusCode.NOT_FOUND,
        "Could not find any versions of model nope",
    )


def test_unknown_paths_are_not_found(server: ModelServer) -> None:
    assert call(server, "GET", "/healthz").status_code == 404


def test_absurdly_deep_json_is_a_bad_request(server: ModelServer) -> None:
    body = b'{"instances": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    reply = call(server, "POST", PREDICT, body)
    assert reply.status_code == 400
    assert "error" in reply.json()
