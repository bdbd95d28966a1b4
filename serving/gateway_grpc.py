"""The gateway's gRPC port: TF Serving's six model calls, checked and routed by the front
(front_grpc.FrontInterceptor, as in the embedded server), then forwarded to stock TF Serving.

Only each request's ModelSpec is read: the requests are parsed as messages that declare that one
field (`model_spec`, field 1 of every request, and of each MultiInference task) and keep every
other field as protobuf's unknown fields, which serialize back unchanged. So the gateway needs
neither TensorFlow nor its protos (tensorflow_serving's request protos import them), and answers
pass through as bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from tensorflow_serving.apis import model_pb2

from serving.access import access_header
from serving.front import Front
from serving.front_grpc import FrontInterceptor

_PACKAGE = "tfplatform.gateway"
_UNLIMITED = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def _partial_messages() -> tuple[type[Any], type[Any]]:
    """(a request with only its model_spec, a MultiInference request with only its tasks'),
    built from descriptors so protobuf itself parses and re-serializes them."""
    spec_type = f".{model_pb2.ModelSpec.DESCRIPTOR.full_name}"
    file = descriptor_pb2.FileDescriptorProto(
        name="tfplatform/gateway/partial.proto", package=_PACKAGE, syntax="proto3",
        dependency=[model_pb2.DESCRIPTOR.name])

    def message(name: str, field_type: str, repeated: bool = False) -> None:
        kind = descriptor_pb2.FieldDescriptorProto
        file.message_type.add(name=name).field.add(
            name="tasks" if repeated else "model_spec", number=1, type=kind.TYPE_MESSAGE,
            type_name=field_type,
            label=kind.LABEL_REPEATED if repeated else kind.LABEL_OPTIONAL)

    message("SpecOnly", spec_type)
    message("TasksOnly", f".{_PACKAGE}.SpecOnly", repeated=True)
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(file.name)
    except KeyError:
        pool.Add(file)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.SpecOnly")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.TasksOnly")))


SpecOnly, TasksOnly = _partial_messages()
_PREDICTION = "/tensorflow.serving.PredictionService/"
METHODS: dict[str, type[Any]] = {
    f"{_PREDICTION}Predict": SpecOnly,
    f"{_PREDICTION}Classify": SpecOnly,
    f"{_PREDICTION}Regress": SpecOnly,
    f"{_PREDICTION}GetModelMetadata": SpecOnly,
    f"{_PREDICTION}MultiInference": TasksOnly,
    "/tensorflow.serving.ModelService/GetModelStatus": SpecOnly,
}


class Forward(grpc.GenericRpcHandler):
    """Each of METHODS, sent on to `upstream` with the caller's deadline (and the upstream's own
    token, where it has one); anything else is UNIMPLEMENTED (reload and profiling are the
    platform's, on the internal network)."""

    def __init__(self, *, upstream: grpc.Channel, upstream_token: str = "") -> None:
        self._metadata = tuple(access_header(token=upstream_token).items()) or None
        self._calls: dict[str, Callable[..., bytes]] = {
            method: upstream.unary_unary(method, request_serializer=kind.SerializeToString)
            for method, kind in METHODS.items()}

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        kind = METHODS.get(method)
        if kind is None:
            return None
        call = self._calls[method]

        def forward(request: Any, context: grpc.ServicerContext) -> bytes:
            try:
                return call(request, timeout=context.time_remaining(), metadata=self._metadata)
            except grpc.RpcError as error:
                context.abort(error.code(), error.details() or "")
                raise  # abort raised already; for the type checker

        return grpc.unary_unary_rpc_method_handler(
            forward, request_deserializer=kind.FromString, response_serializer=None)


def gateway_grpc_server(*, front: Front, token: str, upstream: str, port: int,
                        upstream_token: str = "", threads: int = 32
                        ) -> tuple[grpc.Server, grpc.Channel, int]:
    """(the server, not yet started; its channel to `upstream`; the port it bound)."""
    channel = grpc.insecure_channel(upstream, options=_UNLIMITED)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads,
                                                    thread_name_prefix="gateway-grpc"),
                         interceptors=[FrontInterceptor(token=token, front=front)],
                         options=_UNLIMITED)
    server.add_generic_rpc_handlers((Forward(upstream=channel, upstream_token=upstream_token),))
    bound = server.add_insecure_port(f"[::]:{port}")
    return server, channel, bound
