"""TF Serving's gRPC services (PredictionService, ModelService) over Inference."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent import futures
from functools import partial
from typing import Any, TypeVar

import grpc
from tensorflow_serving.apis import (
    model_management_pb2,
    model_service_pb2_grpc,
    prediction_service_pb2_grpc,
)

from serving.access import TokenInterceptor
from serving.errors import ServingError, invalid_argument
from serving.front import Front
from serving.front_grpc import FrontInterceptor
from serving.inference import Inference
from serving.manager import ModelManager
from serving.multi_inference import multi_inference
from serving.profiler import ProfilerService, profiler_handler

log = logging.getLogger(__name__)

_Request = TypeVar("_Request")
# TF Serving sets no message size limit (SetMaxMessageSize(INT_MAX)).
_UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def _call(
    context: grpc.ServicerContext, handler: Callable[[_Request], Any], request: _Request
) -> Any:
    try:
        return handler(request)
    except ServingError as exc:
        context.abort(exc.grpc_code, exc.message)
    except Exception as exc:
        log.exception("gRPC handler failed")
        context.abort(grpc.StatusCode.INTERNAL, str(exc))


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, inference: Inference) -> None:
        self._inference = inference

    def Predict(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, self._inference.predict, request)

    def Classify(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, self._inference.classify, request)

    def Regress(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, self._inference.regress, request)

    def GetModelMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, self._inference.metadata, request)

    def MultiInference(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, partial(multi_inference, self._inference), request)


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, inference: Inference, manager: ModelManager) -> None:
        self._inference = inference
        self._manager = manager

    def GetModelStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, self._inference.status, request)

    def HandleReloadConfigRequest(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, self._reload, request)

    def _reload(
        self, request: model_management_pb2.ReloadConfigRequest
    ) -> model_management_pb2.ReloadConfigResponse:
        if request.config.WhichOneof("config") != "model_config_list":
            raise invalid_argument(
                "ServerModelConfig type not supported by HandleReloadConfigRequest. Only "
                "ModelConfigList is currently supported"
            )
        for index, model in enumerate(request.config.model_config_list.config):
            log.info(
                "Config entry index: %d path: %s name: %s platform: %s",
                index,
                model.base_path,
                model.name,
                model.model_platform,
            )
        self._manager.reload_config(request.config)
        response = model_management_pb2.ReloadConfigResponse()
        response.status.SetInParent()  # TF Serving always fills in the (OK) status
        return response


def _access_interceptors(*, token: str, front: Front | None) -> list[grpc.ServerInterceptor]:
    if not token:
        return []
    if front is None:
        return [TokenInterceptor(token=token)]
    return [FrontInterceptor(token=token, front=front)]


def create_grpc_server(
    *, inference: Inference, manager: ModelManager, max_threads: int, access_token: str = "",
    front: Front | None = None,
    channel_arguments: tuple[tuple[str, str | int], ...] = (),
    interceptors: tuple[grpc.ServerInterceptor, ...] = (),
    profiler: ProfilerService | None = None,
) -> grpc.Server:
    """`channel_arguments`: --grpc_channel_arguments, over TF Serving's unlimited message size
    (e.g. grpc.max_receive_message_length, which the platform caps). `front`: platform tokens
    are taken too (front_grpc.py)."""
    # A thread pool rather than grpc.aio (unlike the REST port's event loop): on this project's
    # 2-core benchmark machine grpc.aio's per-call work on its one loop outlasted the 2 ms batch
    # timeout, so batches ran half full and batched throughput fell by about 30 %.
    options = dict(_UNLIMITED) | dict(channel_arguments)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_threads), options=list(options.items()),
        # The token first: a refused call is not counted in the metrics (`interceptors`).
        interceptors=[*_access_interceptors(token=access_token, front=front), *interceptors],
    )
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(inference), server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(
        ModelServicer(inference, manager), server
    )
    if profiler is not None:
        server.add_generic_rpc_handlers((profiler_handler(profiler),))
    return server
