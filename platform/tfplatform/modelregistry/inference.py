"""Inference through the platform: pick the version (canary share), forward TF Serving's REST
calls (predict, classify, regress, model status and metadata) and their JSON as is."""

import random
from dataclasses import dataclass

from django.conf import settings

from serving.client import ModelServerError
from tfplatform.core.errors import PayloadTooLarge, Unavailable
from tfplatform.modelregistry.models import ModelLabel
from tfplatform.modelregistry.selectors.routes import ModelRoute
from tfplatform.modelregistry.server import model_server_client


@dataclass(frozen=True)
class InferenceAnswer:
    status: int
    body: bytes
    version: int | None
    label: str | None


def inference_route(
    *, model: ModelRoute, version: int | None, label: str | None
) -> tuple[int | None, str | None]:
    """The version to ask for: explicit version, then label, then canary share, then stable."""
    if version is not None:
        return version, None
    labels = model.labels
    if label is not None:
        # An unknown label goes to the server as a label, so the caller gets TF Serving's error.
        return labels.get(label), label
    roll = random.uniform(0, 100)  # noqa: S311 - a traffic split, not a secret
    canary, stable = ModelLabel.Name.CANARY.value, ModelLabel.Name.STABLE.value
    if canary in labels and roll < model.canary_percent:
        return labels[canary], canary
    if stable in labels:
        return labels[stable], stable
    return None, None


# Calls that run the model take the canary's share; the others describe a version, and without
# one asked for they describe the stable one (or, with no label yet, what the server serves).
RUNNING_CALLS = ("predict", "classify", "regress")
STABLE = ModelLabel.Name.STABLE.value


def inference_forward(
    *, model: ModelRoute, call: str, version: int | None, label: str | None, body: bytes = b""
) -> InferenceAnswer:
    """One of TF Serving's REST calls (serving.client.REST_CALLS) on a model the caller may use:
    the version chosen as for predict, TF Serving's answer as is."""
    if len(body) > settings.PLATFORM.max_predict_bytes:
        raise PayloadTooLarge(
            f"Request body is larger than {settings.PLATFORM.max_predict_bytes} bytes."
        )
    if call in RUNNING_CALLS:
        chosen, chosen_label = inference_route(model=model, version=version, label=label)
    elif call == "metadata" and version is None and label is None and STABLE in model.labels:
        chosen, chosen_label = model.labels[STABLE], STABLE
    elif label is not None:
        chosen, chosen_label = model.labels.get(label), label
    else:
        chosen, chosen_label = version, None
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

