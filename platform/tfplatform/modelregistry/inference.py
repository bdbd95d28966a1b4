"""Inference through the platform: pick the version (canary share), forward TF Serving's REST
calls (predict, classify, regress, model status and metadata) and their JSON as is."""

from dataclasses import dataclass

from django.conf import settings

from serving.client import ModelServerError
from serving.routes import ModelRoute, route_choose
from tfplatform.core.errors import PayloadTooLarge, Unavailable
from tfplatform.modelregistry.server import model_server_client


@dataclass(frozen=True)
class InferenceAnswer:
    status: int
    body: bytes
    version: int | None
    label: str | None


def inference_forward(
    *, model: ModelRoute, call: str, version: int | None, label: str | None, body: bytes = b""
) -> InferenceAnswer:
    """One of TF Serving's REST calls (serving.client.REST_CALLS) on a model the caller may use:
    the version chosen as for predict, TF Serving's answer as is."""
    if len(body) > settings.PLATFORM.max_predict_bytes:
        raise PayloadTooLarge(
            f"Request body is larger than {settings.PLATFORM.max_predict_bytes} bytes."
        )
    chosen, chosen_label = route_choose(route=model, call=call, version=version, label=label)
    try:
        status, answer = model_server_client().rest_forward(
            call=call,
            name=model.name,
            version=chosen,
            label=None if chosen is not None else chosen_label,
            body=body,
        )
    except ModelServerError as error:
        raise Unavailable(f"The model server is unavailable: {error.message}") from error
    return InferenceAnswer(status=status, body=answer, version=chosen, label=chosen_label)

