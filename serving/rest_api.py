"""TF Serving's REST API (http_rest_api_handler.cc), a thin layer over Inference.

Paths are matched with TF Serving's own regular expressions, so the same URLs are accepted and
the same ones are "Malformed request"s.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2, model_pb2

from serving import json_request, json_response, rjson
from serving.errors import Code, ServingError, invalid_argument
from serving.inference import DEFAULT_SIGNATURE, SIGNATURE_DEF_FIELD, Inference, PredictPlan
from serving.metrics import ServingMetrics, served_version, served_version_set, since_us
from serving.rest_paths import MODEL_STATUS, PREDICTION, path_decode
from serving.servable import Servable

log = logging.getLogger(__name__)

_INT64_MAX = 2**63 - 1


def _model_spec(match: re.Match[str]) -> model_pb2.ModelSpec:
    name_raw, version_raw, label_raw, _ = match.groups()
    spec = model_pb2.ModelSpec(name=path_decode(name_raw) if name_raw else "")
    if version_raw:
        version = int(version_raw)
        if version > _INT64_MAX:
            raise invalid_argument(f"Failed to convert version: {version_raw} to numeric.")
        spec.version.value = version
    if label_raw:
        spec.version_label = path_decode(label_raw)
    return spec


def _answer(work: Callable[[], bytes], *, method: str, path: str,
            codes: list[Code] | None = None) -> tuple[int, bytes]:
    """(200, work()) or, when it raises, the error in TF Serving's JSON shape. `codes` gets
    the outcome's status code (for the request metrics)."""
    code = Code.OK
    try:
        return 200, work()
    except ServingError as exc:
        code = exc.code
        return exc.http_status, rjson.error_body(exc.message).encode("utf-8", "surrogateescape")
    except RecursionError:
        # rapidjson parses any depth; Python's recursion limit is the request's fault here.
        code = Code.INVALID_ARGUMENT
        return 400, rjson.error_body("JSON value nests too deeply").encode("utf-8")
    except Exception as exc:  # an unexpected failure still answers in TF Serving's shape
        code = Code.INTERNAL
        log.exception("REST request %s %s failed", method, path)
        return 500, rjson.error_body(f"Internal error: {exc}").encode("utf-8")
    finally:
        if codes is not None:
            codes.append(code)


@dataclass
class PredictCall:
    """A parsed predict that holds its model version (`release`) until it is answered."""

    path: str
    servable: Servable
    plan: PredictPlan
    row_format: bool
    release: ExitStack
    started: float = 0.0  # time.perf_counter() when parsing began


class RestApi:
    def __init__(self, *, inference: Inference, timeout_ms: int = 0,
                 metrics: ServingMetrics | None = None) -> None:
        self._inference = inference
        self._timeout_ms = timeout_ms
        self._metrics = metrics

    def handle(self, *, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        """ProcessRequest: (HTTP status, JSON body) for one request to a /v1/ path."""
        started, codes = time.perf_counter(), list[Code]()
        served_version_set(None)
        answer = _answer(lambda: self._process(method, path, body), method=method, path=path,
                         codes=codes)
        self._record(method, path, started, codes, version=served_version())
        return answer

    def _record(self, method: str, path: str, started: float, codes: list[Code], *,
                version: int | None) -> None:
        """Every /v1/ request counted as TF Serving's http_server.cc counts it: the model name
        and verb (`predict`, as in the URL; empty for GETs) its path parsed to, if any."""
        if self._metrics is None or not codes:
            return
        name, api = "", ""
        if method == "POST" and (match := PREDICTION.fullmatch(path)):
            name, api = path_decode(match.group(1)), match.group(4)
        elif method == "GET" and (match := MODEL_STATUS.fullmatch(path)) and match.group(1):
            name = path_decode(match.group(1))
        self._metrics.request(model_name=name, api=api, entrypoint="REST",
                              latency_us=since_us(started), status=codes[0].name,
                              version=version if name else None)

    # ---- predict without blocking: parse, start, finish ----------------------------------

    def predict_parse(self, *, path: str, body: bytes) -> PredictCall | tuple[int, bytes] | None:
        """A POST's JSON parsed and checked against its model, not yet run: what an event loop
        can do itself. The answer instead when the request fails here; None when the path is
        not a predict (answer those with handle())."""
        match = PREDICTION.fullmatch(path)
        if match is None or match.group(4) != "predict":  # as _process: other cases are malformed
            return None
        stack = ExitStack()
        parsed: list[PredictCall] = []
        started, codes = time.perf_counter(), list[Code]()
        served_version_set(None)

        def parse() -> bytes:
            parsed.append(self._predict_parse(_model_spec(match), body, stack, path=path))
            return b""

        answer = _answer(parse, method="POST", path=path, codes=codes)
        if parsed:
            parsed[0].started = started
            return parsed[0]
        stack.close()
        self._record("POST", path, started, codes, version=served_version())
        return answer

    def predict_start(self, call: PredictCall, *, executor: Executor) -> Future[list[Any]]:
        """Hands the run to the batch scheduler, or to `executor` where it would block."""
        return self._inference.run_start(servable=call.servable, plan=call.plan,
                                         timeout_ms=self._timeout_ms, executor=executor)

    def predict_finish(self, call: PredictCall, done: Future[list[Any]]) -> tuple[int, bytes]:
        """The answer once `done` has finished; releases the model version `call` held."""
        codes = list[Code]()
        try:
            return _answer(
                lambda: json_response.predict_json(
                    call.plan.outputs(done.result()), row_format=call.row_format
                ),
                method="POST", path=call.path, codes=codes,
            )
        finally:
            call.release.close()
            self._record("POST", call.path, call.started, codes, version=call.servable.version)

    def _process(self, method: str, path: str, body: bytes) -> bytes:
        malformed = invalid_argument(f"Malformed request: {method} {path}")
        if method == "POST":
            match = PREDICTION.fullmatch(path)
        elif method == "GET":
            match = MODEL_STATUS.fullmatch(path)
        else:
            raise malformed
        if match is None:
            raise malformed
        spec = _model_spec(match)
        verb = match.group(4)
        if method == "POST":
            if verb == "predict":
                return self._predict(spec, body)
            if verb in ("classify", "regress"):
                return self._classify_regress(spec, body, verb)
            raise malformed
        if not spec.name:
            raise invalid_argument("Missing model name in request.")
        if verb == "metadata":
            return self._metadata(spec)
        return self._status(spec)

    def _predict(self, spec: model_pb2.ModelSpec, body: bytes) -> bytes:
        with ExitStack() as stack:
            call = self._predict_parse(spec, body, stack, path="")
            results = self._inference.run_timed(
                servable=call.servable, api="Predict", feeds=call.plan.feeds,
                fetches=call.plan.fetches, timeout_ms=self._timeout_ms,
            )
        return json_response.predict_json(call.plan.outputs(results), row_format=call.row_format)

    def _predict_parse(self, spec: model_pb2.ModelSpec, body: bytes, stack: ExitStack, *,
                       path: str) -> PredictCall:
        """The request parsed and planned; `stack` holds the model version until closed."""
        document = rjson.parse_object(body)
        held: list[Servable] = []

        def input_dtypes(signature_name: str) -> dict[str, int]:
            # GetInfoMap: the model is looked up only once the JSON has parsed.
            servable = stack.enter_context(self._inference.manager.handle(spec))
            held.append(servable)
            name = signature_name or DEFAULT_SIGNATURE
            if name not in servable.signatures:
                raise invalid_argument(
                    f'Serving signature name: "{name}" not found in signature def'
                )
            return {k: v.dtype for k, v in servable.signatures[name].inputs.items()}

        request = json_request.parse_predict(document, input_dtypes=input_dtypes)
        plan = self._inference.plan_predict(
            servable=held[0], signature_name=request.signature_name, inputs=request.inputs,
            output_filter=(),
        )
        return PredictCall(path=path, servable=held[0], plan=plan,
                           row_format=request.row_format, release=stack)

    def _classify_regress(self, spec: model_pb2.ModelSpec, body: bytes, verb: str) -> bytes:
        signature_name, request_input = json_request.parse_examples(rjson.parse_object(body))
        with self._inference.manager.handle(spec) as servable:
            if verb == "classify":
                results = self._inference.run_classify(
                    servable=servable,
                    signature_name=signature_name,
                    request_input=request_input,
                    timeout_ms=self._timeout_ms,
                )
                return json_response.classify_json(results)
            values = self._inference.run_regress(
                servable=servable,
                signature_name=signature_name,
                request_input=request_input,
                timeout_ms=self._timeout_ms,
            )
        return json_response.regress_json(values)

    def _status(self, spec: model_pb2.ModelSpec) -> bytes:
        request = get_model_status_pb2.GetModelStatusRequest(model_spec=spec)
        response = self._inference.status(request)
        text = json_format.MessageToJson(
            response, indent=1, always_print_fields_with_no_presence=True
        )
        return text.encode("utf-8")

    def _metadata(self, spec: model_pb2.ModelSpec) -> bytes:
        request = get_model_metadata_pb2.GetModelMetadataRequest(
            model_spec=spec, metadata_field=[SIGNATURE_DEF_FIELD]
        )
        response = self._inference.metadata(request)
        signatures = get_model_metadata_pb2.SignatureDefMap()
        response.metadata[SIGNATURE_DEF_FIELD].Unpack(signatures)

        def dump(message: Any) -> str:
            return str(
                json_format.MessageToJson(
                    message,
                    indent=1,
                    preserving_proto_field_name=True,
                    always_print_fields_with_no_presence=True,
                )
            )

        # TF Serving concatenates the two parts by hand (ToJsonString in http_rest_api_util.cc).
        return (
            "{\n"
            f'"model_spec":{dump(response.model_spec)},\n'
            f'"metadata": {{"signature_def": {dump(signatures)}}}\n'
            "}\n"
        ).encode()
