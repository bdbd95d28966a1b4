"""MultiInference over gRPC against TF Serving's own half_plus_two, with the results and errors
of TF Serving's multi_inference_test.cc (regress_x_to_y: 0.5x + 2, regress_x_to_y2: 0.5x + 3).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import text_format
from tensorflow_serving.apis import inference_pb2, prediction_service_pb2_grpc

from serving.config import single_model_config
from serving.server import ModelServer

CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"
PREDICT = "tensorflow/serving/predict"


def request_for(*tasks: tuple[str, str], xs: tuple[float, ...] = (2.0,),
                model: str = "default") -> inference_pb2.MultiInferenceRequest:
    request = inference_pb2.MultiInferenceRequest()
    for x in xs:
        request.input.example_list.examples.add().features.feature["x"].float_list.value.append(x)
    for signature, method in tasks:
        task = request.tasks.add(method_name=method)
        task.model_spec.name = model
        task.model_spec.signature_name = signature
    return request


def refused(stub: Any, request: inference_pb2.MultiInferenceRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        stub.MultiInference(request, 30)
    return caught.value


def test_regress_and_classify_in_task_order(prediction_stub: Any) -> None:
    response = prediction_stub.MultiInference(
        request_for(("regress_x_to_y", REGRESS), ("classify_x_to_y", CLASSIFY),
                    ("regress_x_to_y2", REGRESS)), 30)
    expected = """
    results { model_spec { name: "default" signature_name: "regress_x_to_y"
                           version { value: 123 } }
              regression_result { regressions { value: 3.0 } } }
    results { model_spec { name: "default" signature_name: "classify_x_to_y"
                           version { value: 123 } }
              classification_result { classifications { classes { score: 3.0 } } } }
    results { model_spec { name: "default" signature_name: "regress_x_to_y2"
                           version { value: 123 } }
              regression_result { regressions { value: 4.0 } } }
    """
    assert response == text_format.Parse(expected, inference_pb2.MultiInferenceResponse())


def test_several_examples_and_a_version_label_free_spec(prediction_stub: Any) -> None:
    request = request_for(("regress_x_to_y", REGRESS), xs=(80.0, 2.0))
    request.tasks[0].model_spec.version.value = 123
    response = prediction_stub.MultiInference(request, 30)
    assert [r.value for r in response.results[0].regression_result.regressions] == [42.0, 3.0]
    assert response.results[0].model_spec.version.value == 123


def test_tf_serving_errors(prediction_stub: Any) -> None:
    duplicate = refused(prediction_stub, request_for(("regress_x_to_y", REGRESS),
                                                     ("regress_x_to_y", REGRESS)))
    assert duplicate.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert duplicate.details() == "Duplicate evaluation of signature: regress_x_to_y"

    predict = refused(prediction_stub, request_for(("serving_default", PREDICT)))
    assert predict.code() == grpc.StatusCode.UNIMPLEMENTED
    assert predict.details() == f"Unsupported signature method_name: {PREDICT}"

    other_model = request_for(("regress_x_to_y", REGRESS), ("regress_x_to_y2", REGRESS))
    other_model.tasks[1].model_spec.name = "other"
    mixed = refused(prediction_stub, other_model)
    assert mixed.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert mixed.details() == (
        "All ModelSpecs in a MultiInferenceRequest must access the same model name.")

    missing = refused(prediction_stub, request_for(("nope", REGRESS)))
    assert missing.details() == "Requested signature not found in model graph: nope"

    empty = refused(prediction_stub, request_for(("regress_x_to_y", REGRESS), xs=()))
    assert (empty.code(), empty.details()) == (grpc.StatusCode.INVALID_ARGUMENT, "Input is empty.")

    # classify_x_to_y used as a regression: its output is "scores", not "outputs".
    wrong = refused(prediction_stub, request_for(("classify_x_to_y", REGRESS)))
    assert wrong.details().startswith("No regression outputs found in SignatureDef: ")

    unknown = refused(prediction_stub, request_for(("regress_x_to_y", REGRESS), model="absent"))
    assert unknown.code() == grpc.StatusCode.NOT_FOUND


def test_method_name_check(
    start_server: Callable[..., ModelServer], model_base: Path
) -> None:
    """With --enable_signature_method_name_check a classify signature cannot regress."""
    server = start_server(
        config=single_model_config(name="default", base_path=str(model_base / "half_plus_two")),
        enable_signature_method_name_check=True,
    )
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        error = refused(stub, request_for(("classify_x_to_y", REGRESS)))
        assert error.details() == (
            f"Expected regression signature method_name to be {REGRESS}. Was: {CLASSIFY}")
        ok = stub.MultiInference(request_for(("classify_x_to_y", CLASSIFY)), 30)
        assert ok.results[0].classification_result.classifications[0].classes[0].score == 3.0
