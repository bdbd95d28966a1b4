"""The front on the gRPC port: TF Serving's inference and status calls with a platform token as
call metadata (`authorization: Bearer <token>`); each request's ModelSpec is rewritten to the
version it is routed to before the servicer sees it. Everything else (reload, profiling) takes
the server's own token."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

import grpc

from serving.access import HEADER, access_allowed, grpc_refusal
from serving.errors import ServingError
from serving.front import Front

_PREDICTION = "/tensorflow.serving.PredictionService/"
_SPECS: dict[str, tuple[str, Callable[[Any], Iterable[Any]]]] = {
    f"{_PREDICTION}Predict": ("predict", lambda r: (r.model_spec,)),
    f"{_PREDICTION}Classify": ("classify", lambda r: (r.model_spec,)),
    f"{_PREDICTION}Regress": ("regress", lambda r: (r.model_spec,)),
    f"{_PREDICTION}GetModelMetadata": ("metadata", lambda r: (r.model_spec,)),
    f"{_PREDICTION}MultiInference": ("predict", lambda r: [t.model_spec for t in r.tasks]),
    "/tensorflow.serving.ModelService/GetModelStatus": ("status", lambda r: (r.model_spec,)),
}
ONLY_MODEL_CALLS = ("A platform token opens TF Serving's model calls only: Predict, Classify, "
                    "Regress, MultiInference, GetModelMetadata and GetModelStatus.")


class FrontInterceptor(grpc.ServerInterceptor):
    """The server's own token passes as before (access.TokenInterceptor); a platform token is
    checked, throttled and routed by `front`."""

    def __init__(self, *, token: str, front: Front) -> None:
        self._token = token
        self._front = front
        self._internal_only = grpc_refusal(grpc.StatusCode.PERMISSION_DENIED, ONLY_MODEL_CALLS)

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: Any) -> Any:
        metadata = dict(handler_call_details.invocation_metadata or ())
        presented = metadata.get(HEADER)
        if access_allowed(token=self._token, presented=presented):
            return continuation(handler_call_details)
        try:
            caller = self._front.caller(presented)
        except ServingError as error:
            return grpc_refusal(error.grpc_code, error.message)
        found = _SPECS.get(handler_call_details.method)
        handler = continuation(handler_call_details) if found else None
        if found is None or handler is None or handler.unary_unary is None:
            return self._internal_only
        call, specs_of = found
        front, serve = self._front, handler.unary_unary

        def routed(request: Any, context: grpc.ServicerContext) -> Any:
            roll = random.uniform(0, 100)  # noqa: S311 - one canary roll for all of a call's tasks
            try:
                for index, spec in enumerate(specs_of(request)):
                    choice = front.route(
                        caller=caller, name=spec.name, call=call,
                        version=spec.version.value if spec.HasField("version") else None,
                        label=spec.version_label or None, roll=roll, throttle=index == 0)
                    if choice.version is not None:
                        spec.version.value = choice.version  # clears version_label (a oneof)
                    elif choice.label is not None:
                        spec.version_label = choice.label
            except ServingError as error:
                context.abort(error.grpc_code, error.message)
            return serve(request, context)

        return grpc.unary_unary_rpc_method_handler(
            routed, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)
