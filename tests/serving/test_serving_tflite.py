"""TF Lite versions: a half-plus-two made here, converted by the confined converter, answers
Predict over gRPC and REST from its model.tflite when the server prefers TF Lite, and from the
SavedModel beside it (here a half-plus-three, so the two cannot be confused) when it does not."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from serving.config import BatchingOptions, single_model_config
from serving.errors import ServingError
from serving.server import ModelServer
from serving.tensors import to_proto
from serving.tflite_convert import EXIT_FAILED
from tests.serving.conftest import copy_tree

ROOT = Path(__file__).resolve().parents[2]


class Affine(tf.Module):
    def __init__(self, add: float) -> None:
        super().__init__()
        self.add = add

    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")])
    def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": 0.5 * x + self.add}


def save(add: float, path: Path) -> Path:
    module = Affine(add)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


def convert(saved_model: Path, output: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "serving.tflite_convert", str(saved_model), str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )


@pytest.fixture(scope="module")
def tflite_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("tflite")
    version = save(3.0, work / "models" / "affine" / "1")
    done = convert(save(2.0, work / "half_plus_two"), version / "model.tflite")
    assert done.returncode == 0, done.stderr[-2000:]
    return work / "models" / "affine"


def grpc_predict(server: ModelServer, signature: str = "") -> predict_pb2.PredictResponse:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "affine"
    request.model_spec.signature_name = signature
    request.inputs["x"].CopyFrom(to_proto(np.array([[1.0], [2.0], [5.0]], dtype=np.float32)))
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return stub.Predict(request, 30)


@pytest.mark.parametrize("batching", [None, BatchingOptions()], ids=["direct", "batched"])
def test_tflite_model_answers_predict_over_grpc_and_rest(
    start_server: Callable[..., ModelServer], tflite_base: Path, batching: BatchingOptions | None
) -> None:
    server = start_server(config=single_model_config(name="affine", base_path=str(tflite_base)),
                          prefer_tflite_model=True, batching=batching)
    for signature in ("", "serving_default"):
        reply = grpc_predict(server, signature)
        assert tf.make_ndarray(reply.outputs["y"]).tolist() == [[2.5], [3.0], [4.5]]
        assert reply.model_spec.signature_name == "serving_default"
        assert reply.model_spec.version.value == 1
    rest = requests.post(f"{server.rest_url}/v1/models/affine:predict",
                         json={"instances": [[1.0], [2.0]]}, timeout=30)
    assert rest.json() == {"predictions": [[2.5], [3.0]]}
    named = requests.post(f"{server.rest_url}/v1/models/affine/versions/1:predict",
                          json={"signature_name": "serving_default", "inputs": {"x": [[80.0]]}},
                          timeout=30)
    assert named.json() == {"outputs": [[42.0]]}
    missing = requests.post(f"{server.rest_url}/v1/models/affine:predict",
                            json={"signature_name": "nope", "instances": [[1.0]]}, timeout=30)
    assert missing.status_code == 400
    assert missing.json() == {"error": 'Serving signature name: "nope" not found in signature def'}


def test_tflite_metadata_shows_its_signature(
    start_server: Callable[..., ModelServer], tflite_base: Path
) -> None:
    server = start_server(config=single_model_config(name="affine", base_path=str(tflite_base)),
                          prefer_tflite_model=True)
    metadata = requests.get(f"{server.rest_url}/v1/models/affine/metadata", timeout=30).json()
    signature = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert signature["method_name"] == "tensorflow/serving/predict"
    assert signature["inputs"]["x"]["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in signature["inputs"]["x"]["tensor_shape"]["dim"]] == ["-1", "1"]
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "affine"
    with grpc.insecure_channel(server.grpc_target) as channel:
        reply = prediction_service_pb2_grpc.PredictionServiceStub(channel).GetModelMetadata(
            request, 30)
    assert reply.model_spec.version.value == 1


def test_without_prefer_tflite_model_the_saved_model_answers(
    start_server: Callable[..., ModelServer], tflite_base: Path
) -> None:
    server = start_server(config=single_model_config(name="affine", base_path=str(tflite_base)))
    assert tf.make_ndarray(grpc_predict(server).outputs["y"]).tolist() == [[3.5], [4.0], [5.5]]


def test_converter_refuses_what_is_not_a_saved_model(tmp_path: Path) -> None:
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "saved_model.pb").write_bytes(b"not a protobuf")
    done = convert(tmp_path / "junk", tmp_path / "out" / "model.tflite")
    assert done.returncode == EXIT_FAILED
    assert not (tmp_path / "out" / "model.tflite").exists()


class ReadsAFile(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([1], tf.string, name="f")])
    def serve(self, f: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": tf.strings.length(tf.io.read_file(f[0]))}


def test_a_tflite_model_with_tensorflow_ops_does_not_load(
    start_server: Callable[..., ModelServer], tmp_path: Path
) -> None:
    """Converted with SELECT_TF_OPS (FlexReadFile): the interpreter has no Flex delegate."""
    module = ReadsAFile()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.serve})
    converter = tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "sm"))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS,
                                           tf.lite.OpsSet.SELECT_TF_OPS]
    version = tmp_path / "models" / "reader" / "1"
    version.mkdir(parents=True)
    (version / "model.tflite").write_bytes(converter.convert())
    with pytest.raises(ServingError) as failed:
        start_server(config=single_model_config(name="reader", base_path=str(version.parent)),
                     prefer_tflite_model=True)
    assert "FlexReadFile" in failed.value.message


@pytest.mark.parametrize(("model", "tensor"), [
    ("saved_model_half_plus_two_tflite", "x"),  # no SignatureDefs: one built from its tensors
    ("saved_model_half_plus_two_tflite_with_sigdef", "tflite_input"),  # in its metadata buffer
], ids=["no-signature-defs", "signature-defs-metadata"])
def test_tf_servings_own_tflite_models_answer_as_tf_serving_does(
    start_server: Callable[..., ModelServer], testdata: Path, tmp_path: Path, model: str,
    tensor: str
) -> None:
    """As tensorflow_model_server_test.py's VerifyPredictRequest asks them: x = 2.0 gives 3.0."""
    base = copy_tree(testdata / model, tmp_path / "default")
    server = start_server(config=single_model_config(name="default", base_path=str(base)),
                          prefer_tflite_model=True)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "default"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto([2.0], shape=[1]))
    request.output_filter.append("y")
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        reply = stub.Predict(request, 30)
        assert reply.outputs["y"].dtype == types_pb2.DT_FLOAT
        assert list(reply.outputs["y"].float_val) == [3.0]
        assert reply.model_spec.version.value == 123
        assert reply.model_spec.signature_name == "serving_default"
        request.inputs["x"].CopyFrom(tf.make_tensor_proto([[2.0], [2.0]], shape=[2, 1]))
        assert list(stub.Predict(request, 30).outputs["y"].float_val) == [3.0, 3.0]
        request.inputs["x"].CopyFrom(tf.make_tensor_proto([2], dtype=tf.int32, shape=[1]))
        with pytest.raises(grpc.RpcError) as wrong:
            stub.Predict(request, 30)
        assert wrong.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    rest = requests.post(f"{server.rest_url}/v1/models/default:predict",
                         json={"instances": [[2.0], [5.0]]}, timeout=30)
    assert rest.json() == {"predictions": [[3.0], [4.5]]}
    metadata = requests.get(f"{server.rest_url}/v1/models/default/metadata", timeout=30).json()
    signature = metadata["metadata"]["signature_def"]["signature_def"]
    assert list(signature) == ["serving_default"]
    assert signature["serving_default"]["method_name"] == "tensorflow/serving/predict"
    assert signature["serving_default"]["inputs"]["x"]["name"] == tensor
    assert signature["serving_default"]["outputs"]["y"]["name"] == "y"


def test_a_tflite_model_whose_signature_defs_metadata_is_not_one_does_not_load(
    start_server: Callable[..., ModelServer], testdata: Path, tmp_path: Path
) -> None:
    """TF Serving's own model with its metadata buffer's SignatureDef bytes broken."""
    base = copy_tree(testdata / "saved_model_half_plus_two_tflite_with_sigdef",
                     tmp_path / "default")
    model = base / "00000123" / "model.tflite"
    content = model.read_bytes()
    at = content.index(b"tflite_input:0")
    model.write_bytes(content[:at] + b"\xff" * len("tflite_input:0") + content[at + 14:])
    with pytest.raises(ServingError) as failed:
        start_server(config=single_model_config(name="default", base_path=str(base)),
                     prefer_tflite_model=True)
    assert "Invalid SignatureDefs found in TfLite model" in failed.value.message
