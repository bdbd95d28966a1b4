"""PredictionService.MultiInference: classify and regress tasks over one Input in one session
run, as TF Serving's multi_inference.cc and multi_inference_helper.cc do it, with their errors.

As in TF Serving, the first task's ModelSpec picks the servable (version or label included);
later tasks must name the same model, and their own version choice is not looked at. TF
Serving's REST API has no multi-inference, so this is gRPC only.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow_serving.apis import classification_pb2, inference_pb2, model_pb2

from serving.classify_regress import Classes, classifications, regressions, serialized_examples
from serving.errors import Code, ServingError, invalid_argument
from serving.inference import (
    CLASSIFY_METHOD,
    DEFAULT_SIGNATURE,
    REGRESS_METHOD,
    Inference,
    _debug,
    _model_spec,
)
from serving.servable import Servable


@dataclass(frozen=True)
class _Task:
    spec: model_pb2.ModelSpec
    method: str
    input_name: str
    outputs: dict[str, str]  # "classes"/"scores"/"outputs" -> graph tensor name


def _classify_plan(signature: meta_graph_pb2.SignatureDef, check_method: bool) -> dict[str, str]:
    """PreProcessClassification."""
    if check_method and signature.method_name != CLASSIFY_METHOD:
        raise invalid_argument(
            f"Expected classification signature method_name to be {CLASSIFY_METHOD}. "
            f"Was: {signature.method_name}"
        )
    if len(signature.inputs) != 1:
        raise invalid_argument("Expected one input Tensor.")
    if len(signature.outputs) not in (1, 2):
        raise invalid_argument(
            f"Expected one or two output Tensors, found {len(signature.outputs)}"
        )
    if "inputs" not in signature.inputs:
        raise invalid_argument(
            f"No classification inputs found in SignatureDef: {_debug(signature)}"
        )
    outputs = {key: signature.outputs[key].name
               for key in ("classes", "scores") if key in signature.outputs}
    if not outputs:
        raise invalid_argument(
            'Expected classification signature outputs to contain at least one of "classes" '
            f'or "scores". Signature was: {_debug(signature)}'
        )
    return outputs


def _regress_plan(signature: meta_graph_pb2.SignatureDef, check_method: bool) -> dict[str, str]:
    """PreProcessRegression."""
    if check_method and signature.method_name != REGRESS_METHOD:
        raise invalid_argument(
            f"Expected regression signature method_name to be {REGRESS_METHOD}. "
            f"Was: {signature.method_name}"
        )
    if len(signature.inputs) != 1:
        raise invalid_argument("Expected one input Tensor.")
    if len(signature.outputs) != 1:
        raise invalid_argument("Expected one output Tensor.")
    if "inputs" not in signature.inputs:
        raise invalid_argument(f"No regression inputs found in SignatureDef: {_debug(signature)}")
    if "outputs" not in signature.outputs:
        raise invalid_argument(
            f"No regression outputs found in SignatureDef: {_debug(signature)}"
        )
    return {"outputs": signature.outputs["outputs"].name}


def _plan(
    servable: Servable, request: inference_pb2.MultiInferenceRequest, check_method: bool
) -> list[_Task]:
    model_name = ""
    seen: set[str] = set()
    tasks: list[_Task] = []
    for task in request.tasks:
        if not task.model_spec.name:
            raise invalid_argument("Found ModelSpec with an empty model name.")
        if not model_name:
            model_name = task.model_spec.name
        elif task.model_spec.name != model_name:
            raise invalid_argument(
                "All ModelSpecs in a MultiInferenceRequest must access the same model name."
            )
        name = task.model_spec.signature_name or DEFAULT_SIGNATURE
        if name in seen:
            raise invalid_argument(f"Duplicate evaluation of signature: {name}")
        seen.add(name)
        signature = servable.signatures.get(name)
        if signature is None:
            raise invalid_argument(f"Requested signature not found in model graph: {name}")
        if task.method_name == CLASSIFY_METHOD:
            outputs = _classify_plan(signature, check_method)
        elif task.method_name == REGRESS_METHOD:
            outputs = _regress_plan(signature, check_method)
        else:
            raise ServingError(
                Code.UNIMPLEMENTED, f"Unsupported signature method_name: {task.method_name}"
            )
        tasks.append(_Task(task.model_spec, task.method_name, signature.inputs["inputs"].name,
                           outputs))
    return tasks


def multi_inference(
    inference: Inference, request: inference_pb2.MultiInferenceRequest
) -> inference_pb2.MultiInferenceResponse:
    """RunMultiInferenceWithServerCore: one run feeding the examples to every task's input and
    fetching the union of their outputs; results in task order."""
    first = request.tasks[0].model_spec if request.tasks else model_pb2.ModelSpec()
    response = inference_pb2.MultiInferenceResponse()
    with inference.manager.handle(first) as servable:
        tasks = _plan(servable, request, inference.check_method_names)
        examples = serialized_examples(request.input)
        feeds = {name: examples for name in sorted({t.input_name for t in tasks})}
        fetches = sorted({name for t in tasks for name in t.outputs.values()})
        values = dict(zip(fetches, inference.runner.run(
            servable=servable, feeds=feeds, fetches=fetches, timeout_ms=0,
        ), strict=True))
        count = len(examples)
        for task in tasks:
            result = response.results.add()
            found = {key: values[name] for key, name in task.outputs.items()}
            if task.method == CLASSIFY_METHOD:
                _fill_classes(result.classification_result,
                              classifications(found.get("classes"), found.get("scores"), count))
            else:
                for value in regressions(found["outputs"], count):
                    result.regression_result.regressions.add(value=value)
            _model_spec(result.model_spec, task.spec.name,
                        task.spec.signature_name or DEFAULT_SIGNATURE, servable.version)
    return response


def _fill_classes(result: classification_pb2.ClassificationResult,
                  rows: list[Classes]) -> None:
    for classes in rows:
        entry = result.classifications.add()
        for label, score in classes:
            entry.classes.add(label=label, score=score)
