"""The request handlers shared by gRPC and REST: TF Serving's predict_util, classifier,
regressor, get_model_metadata_impl and get_model_status_impl, with their error texts.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf import text_format
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    input_pb2,
    model_pb2,
    predict_pb2,
    regression_pb2,
)

from serving import tensors as T
from serving.batching import BatchingRunner, Runner
from serving.classify_regress import Classes, classifications, regressions, serialized_examples
from serving.errors import Code, ServingError, invalid_argument
from serving.manager import ModelManager
from serving.metrics import ServingMetrics, since_us
from serving.servable import Servable

DEFAULT_SIGNATURE = "serving_default"
PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
SIGNATURE_DEF_FIELD = "signature_def"


def _join(names: Any) -> str:
    return ",".join(sorted(names))


def _debug(message: Any) -> str:
    return str(text_format.MessageToString(message))


@dataclass(frozen=True)
class PredictPlan:
    signature_name: str
    aliases: list[str]
    feeds: dict[str, np.ndarray]
    fetches: list[str]

    def outputs(self, results: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.aliases, results, strict=True))


class Inference:
    def __init__(
        self, *, manager: ModelManager, runner: Runner, check_method_names: bool = False
    ) -> None:
        self.manager = manager
        self.runner = runner
        self.check_method_names = check_method_names  # --enable_signature_method_name_check
        self.metrics: ServingMetrics | None = None  # runtime latency, when set

    def run_timed(self, *, servable: Servable, api: str, feeds: Mapping[str, np.ndarray],
                  fetches: Sequence[str], timeout_ms: int) -> list[np.ndarray]:
        """The runner's run, recorded as TF Serving's runtime latency (batch queueing
        included: TF Serving times the batching session's Run)."""
        started = time.perf_counter()
        results = self.runner.run(servable=servable, feeds=feeds, fetches=fetches,
                                  timeout_ms=timeout_ms)
        if self.metrics is not None:
            self.metrics.runtime(model_name=servable.name, api=api, latency_us=since_us(started))
        return results

    # ---- Predict ----------------------------------------------------------------------

    def predict(self, request: predict_pb2.PredictRequest) -> predict_pb2.PredictResponse:
        if not request.HasField("model_spec"):
            raise invalid_argument("Missing ModelSpec")
        with self.manager.handle(request.model_spec) as servable:
            signature_name, outputs = self.run_predict(
                servable=servable,
                signature_name=request.model_spec.signature_name,
                inputs=dict(request.inputs),
                output_filter=list(request.output_filter),
                timeout_ms=0,
            )
        response = predict_pb2.PredictResponse()
        _model_spec(response.model_spec, request.model_spec.name, signature_name, servable.version)
        for alias, array in outputs.items():
            response.outputs[alias].CopyFrom(T.to_proto(array))
        return response

    def run_start(self, *, servable: Servable, plan: PredictPlan, timeout_ms: int,
                  executor: Executor) -> Future[list[np.ndarray]]:
        """Starts a planned run without blocking: queued with the batch scheduler, or on
        `executor` where it would block (batching off, rows beyond max_batch_size). A refusal
        (a full batch queue) comes back as the future's exception."""
        runner = self.runner
        started = time.perf_counter()
        try:
            if isinstance(runner, BatchingRunner) and runner.accepts(plan.feeds):
                done = runner.submit(servable=servable, feeds=plan.feeds, fetches=plan.fetches,
                                     timeout_ms=timeout_ms)
            else:
                done = executor.submit(runner.run, servable=servable, feeds=plan.feeds,
                                       fetches=plan.fetches, timeout_ms=timeout_ms)
        except Exception as exc:
            failed: Future[list[np.ndarray]] = Future()
            failed.set_exception(exc)
            return failed
        metrics = self.metrics
        if metrics is not None:
            def record(future: Future[list[np.ndarray]]) -> None:
                if not future.cancelled() and future.exception() is None:
                    metrics.runtime(model_name=servable.name, api="Predict",
                                    latency_us=since_us(started))

            done.add_done_callback(record)
        return done

    def run_predict(
        self,
        *,
        servable: Servable,
        signature_name: str,
        inputs: Mapping[str, Any],
        output_filter: Sequence[str],
        timeout_ms: int,
    ) -> tuple[str, dict[str, np.ndarray]]:
        """RunPredict: inputs are arrays (REST) or TensorProtos (gRPC), keyed by alias."""
        plan = self.plan_predict(
            servable=servable, signature_name=signature_name, inputs=inputs,
            output_filter=output_filter,
        )
        results = self.run_timed(servable=servable, api="Predict", feeds=plan.feeds,
                                 fetches=plan.fetches, timeout_ms=timeout_ms)
        return plan.signature_name, plan.outputs(results)

    def plan_predict(
        self,
        *,
        servable: Servable,
        signature_name: str,
        inputs: Mapping[str, Any],
        output_filter: Sequence[str],
    ) -> PredictPlan:
        """RunPredict's checks and feeds, without the run (callers that must not block run it)."""
        name = signature_name or DEFAULT_SIGNATURE
        signature = servable.signatures.get(name)
        if signature is None:
            raise ServingError(
                Code.FAILED_PRECONDITION, f'Serving signature key "{name}" not found.'
            )
        if self.check_method_names and signature.method_name not in (
            PREDICT_METHOD,
            CLASSIFY_METHOD,
            REGRESS_METHOD,
        ):
            raise ServingError(
                Code.INTERNAL,
                "Expected prediction signature method_name to be one of {"
                f"{PREDICT_METHOD}, {CLASSIFY_METHOD}, {REGRESS_METHOD}}}. "
                f"Was: {signature.method_name}",
            )
        feeds = _input_values(signature, inputs)
        aliases = _output_aliases(signature, output_filter)
        return PredictPlan(
            signature_name=name,
            aliases=aliases,
            feeds=feeds,
            fetches=[signature.outputs[alias].name for alias in aliases],
        )

    # ---- Classify and Regress -----------------------------------------------------------

    def classify(
        self, request: classification_pb2.ClassificationRequest
    ) -> classification_pb2.ClassificationResponse:
        if not request.HasField("model_spec"):
            raise invalid_argument("Missing ModelSpec")
        with self.manager.handle(request.model_spec) as servable:
            results = self.run_classify(
                servable=servable,
                signature_name=request.model_spec.signature_name,
                request_input=request.input,
                timeout_ms=0,
            )
        response = classification_pb2.ClassificationResponse()
        _model_spec(
            response.model_spec,
            request.model_spec.name,
            request.model_spec.signature_name or DEFAULT_SIGNATURE,
            servable.version,
        )
        for classes in results:
            entry = response.result.classifications.add()
            for label, score in classes:
                entry.classes.add(label=label, score=score)
        return response

    def regress(
        self, request: regression_pb2.RegressionRequest
    ) -> regression_pb2.RegressionResponse:
        if not request.HasField("model_spec"):
            raise invalid_argument("Missing ModelSpec")
        with self.manager.handle(request.model_spec) as servable:
            values = self.run_regress(
                servable=servable,
                signature_name=request.model_spec.signature_name,
                request_input=request.input,
                timeout_ms=0,
            )
        response = regression_pb2.RegressionResponse()
        _model_spec(
            response.model_spec,
            request.model_spec.name,
            request.model_spec.signature_name or DEFAULT_SIGNATURE,
            servable.version,
        )
        for value in values:
            response.result.regressions.add(value=value)
        return response

    def _signature(
        self, servable: Servable, signature_name: str, method: str, kind: str
    ) -> meta_graph_pb2.SignatureDef:
        name = signature_name or DEFAULT_SIGNATURE
        signature = servable.signatures.get(name)
        if signature is None:
            raise invalid_argument(f"No signature was found with the name: {name}")
        if self.check_method_names and signature.method_name != method:
            raise invalid_argument(
                f"Expected {kind} signature method_name to be {method}. "
                f"Was: {signature.method_name}"
            )
        if len(signature.inputs) != 1:
            raise invalid_argument("Expected one input Tensor.")
        if "inputs" not in signature.inputs:
            raise invalid_argument(f"No {kind} inputs found in SignatureDef: {_debug(signature)}")
        return signature

    def run_classify(
        self,
        *,
        servable: Servable,
        signature_name: str,
        request_input: input_pb2.Input,
        timeout_ms: int,
    ) -> list[Classes]:
        signature = self._signature(servable, signature_name, CLASSIFY_METHOD, "classification")
        if len(signature.outputs) not in (1, 2):
            raise invalid_argument(
                f"Expected one or two output Tensors, found {len(signature.outputs)}"
            )
        wanted = [key for key in ("classes", "scores") if key in signature.outputs]
        if not wanted:
            raise invalid_argument(
                'Expected classification signature outputs to contain at least one of "classes" '
                f'or "scores". Signature was: {_debug(signature)}'
            )
        examples = serialized_examples(request_input)
        outputs = self.run_timed(
            servable=servable,
            api="Classify",
            feeds={signature.inputs["inputs"].name: examples},
            fetches=[signature.outputs[key].name for key in wanted],
            timeout_ms=timeout_ms,
        )
        found = dict(zip(wanted, outputs, strict=True))
        return classifications(found.get("classes"), found.get("scores"), len(examples))

    def run_regress(
        self,
        *,
        servable: Servable,
        signature_name: str,
        request_input: input_pb2.Input,
        timeout_ms: int,
    ) -> list[float]:
        signature = self._signature(servable, signature_name, REGRESS_METHOD, "regression")
        if len(signature.outputs) != 1:
            raise invalid_argument("Expected one output Tensor.")
        if "outputs" not in signature.outputs:
            raise invalid_argument(
                f"No regression outputs found in SignatureDef: {_debug(signature)}"
            )
        examples = serialized_examples(request_input)
        (output,) = self.run_timed(
            servable=servable,
            api="Regress",
            feeds={signature.inputs["inputs"].name: examples},
            fetches=[signature.outputs["outputs"].name],
            timeout_ms=timeout_ms,
        )
        return regressions(output, len(examples))

    # ---- Metadata and status ------------------------------------------------------------

    def metadata(
        self, request: get_model_metadata_pb2.GetModelMetadataRequest
    ) -> get_model_metadata_pb2.GetModelMetadataResponse:
        if not request.HasField("model_spec"):
            raise invalid_argument("Missing ModelSpec")
        if not request.metadata_field:
            raise invalid_argument(
                "GetModelMetadataRequest must specify at least one metadata_field"
            )
        for field in request.metadata_field:
            if field != SIGNATURE_DEF_FIELD:
                raise invalid_argument(f"Metadata field {field} is not supported")
        with self.manager.handle(request.model_spec) as servable:
            signatures = get_model_metadata_pb2.SignatureDefMap()
            for key, signature in servable.signatures.items():
                signatures.signature_def[key].CopyFrom(signature)
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = servable.name
            response.model_spec.version.value = servable.version
        response.metadata[SIGNATURE_DEF_FIELD].Pack(signatures)
        return response

    def status(
        self, request: get_model_status_pb2.GetModelStatusRequest
    ) -> get_model_status_pb2.GetModelStatusResponse:
        """GetModelStatusImpl: a version label, if given, is ignored just as TF Serving does."""
        if not request.HasField("model_spec"):
            raise invalid_argument("Missing ModelSpec")
        name = request.model_spec.name
        states = self.manager.version_states(name)
        if request.model_spec.HasField("version"):
            version = request.model_spec.version.value
            if version not in states:
                raise ServingError(
                    Code.NOT_FOUND, f"Could not find version {version} of model {name}"
                )
            states = {version: states[version]}
        elif not states:
            raise ServingError(Code.NOT_FOUND, f"Could not find any versions of model {name}")
        response = get_model_status_pb2.GetModelStatusResponse()
        for version in sorted(states, reverse=True):
            state = states[version]
            entry = response.model_version_status.add(
                version=version,
                state=get_model_status_pb2.ModelVersionStatus.State.Value(state.state),
            )
            entry.status.SetInParent()  # TF Serving always reports health, OK included
            if state.error is not None:
                entry.status.error_code = int(state.error.code)
                entry.status.error_message = state.error.message
        return response


def _model_spec(spec: model_pb2.ModelSpec, name: str, signature: str, version: int) -> None:
    """MakeModelSpec: what a response says it was answered by."""
    spec.name = name
    spec.signature_name = signature
    spec.version.value = version


def _input_values(
    signature: meta_graph_pb2.SignatureDef, inputs: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """VerifyRequestInputsSize and saved_model::GetInputValues, keyed by graph tensor name."""
    expected = signature.inputs
    if len(inputs) > len(expected) or (len(inputs) < len(expected) and not signature.defaults):
        sent, wanted = set(inputs), set(expected)
        raise invalid_argument(
            f"input size does not match signature: {len(inputs)}!={len(expected)} "
            f"len({{{_join(sent)}}}) != len({{{_join(wanted)}}}). "
            f"Sent extra: {{{_join(sent - wanted)}}}. "
            f"Missing but required: {{{_join(wanted - sent)}}}."
        )
    feeds: dict[str, np.ndarray] = {}
    seen: set[str] = set()
    for alias in sorted(expected):
        feed_name = expected[alias].name
        if alias in inputs:
            value = inputs[alias]
            seen.add(alias)
        elif alias in signature.defaults:
            value = signature.defaults[alias]
        else:
            raise invalid_argument(
                f"Signature input alias: {alias}(feed name: {feed_name}) not found in request "
                "and no default value provided. Inputs expected to be in the request "
                f"{{{_join(inputs)}}}, or default input alias set: {_join(signature.defaults)}"
            )
        array = value if isinstance(value, np.ndarray) else T.to_ndarray(value)
        if array is None:
            raise invalid_argument(f"tensor parsing error: {alias}")
        feeds[feed_name] = array
    if inputs and len(seen) != len(inputs):
        raise invalid_argument(
            f"Inputs contains invalid name. Used request inputs: {_join(seen)}, "
            f"request input: {_join(inputs)}"
        )
    return feeds


def _output_aliases(
    signature: meta_graph_pb2.SignatureDef, output_filter: Sequence[str]
) -> list[str]:
    aliases: list[str] = []
    for alias in output_filter:
        if alias not in signature.outputs:
            raise invalid_argument(
                f"output tensor alias not found in signature: {alias} Outputs expected to be "
                f"in the set {{{_join(signature.outputs)}}}."
            )
        if alias in aliases:
            raise invalid_argument(f"duplicate output tensor alias: {alias}")
        aliases.append(alias)
    return aliases or sorted(signature.outputs)
