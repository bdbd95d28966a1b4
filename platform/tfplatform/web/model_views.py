"""Model pages: the registry's list, a model's versions and labels, its actions and its
"try it" box."""

from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from tfplatform.core.errors import InvalidInput, PayloadTooLarge, PlatformError
from tfplatform.core.throttling import ScopedWindowRateThrottle
from tfplatform.experiments.selectors.lineage import experiment_lineage_visible
from tfplatform.modelregistry.health import WHOLE_MODEL, Health
from tfplatform.modelregistry.inference import inference_forward
from tfplatform.modelregistry.models import ModelLabel
from tfplatform.modelregistry.selectors.access import serving_endpoints
from tfplatform.modelregistry.selectors.health import model_versions_serving_health
from tfplatform.modelregistry.selectors.models import (
    model_get,
    model_get_for_change,
    model_label_versions,
    model_list,
    model_loading,
    model_signature_version,
    model_version_get,
)
from tfplatform.modelregistry.selectors.routes import model_route_get
from tfplatform.modelregistry.services.labels import model_label_set, model_settings_update
from tfplatform.modelregistry.services.publish import model_can_change
from tfplatform.modelregistry.services.versions import model_version_undeploy


@login_required
def model_list_page(request: HttpRequest) -> HttpResponse:
    models = model_list(user=request.user).prefetch_related("versions", "labels")
    return render(request, "models/list.html", {"models": models})


@login_required
def model_detail_page(request: HttpRequest, name: str) -> HttpResponse:
    model = model_get(user=request.user, name=name)
    labels = model_label_versions(model=model)
    versions = [
        {"version": v, "labels": [label for label, n in labels.items() if n == v.version],
         "lineage": experiment_lineage_visible(user=request.user,
                                               experiment_id=v.source_experiment_id)}
        for v in model.versions.order_by("-version")
    ]
    context = {
        "model": model,
        "versions": versions,
        "labels": labels,
        "can_change": model_can_change(user=request.user, model=model),  # type: ignore[arg-type]
        "loading": model_loading(model=model),
        "signature_version": model_signature_version(model=model),
        **_health_views(model_versions_serving_health(model=model)),
        "health_sample_seconds": settings.PLATFORM.serving_health_sample_seconds,
        "health_scraped": bool(settings.PLATFORM.tf_serving_metrics_path),
        "direct": serving_endpoints(),
    }
    return render(request, "models/detail.html", context)


def _health_views(figures: dict[int | None, Health]) -> dict[str, Any]:
    """The whole model's health, and each reported version's, newest first."""
    whole = figures.get(WHOLE_MODEL)
    return {
        "health": _health_view(whole) if whole is not None else None,
        "version_health": [
            {"version": version, **_health_view(figures[version])}
            for version in sorted((v for v in figures if v is not None), reverse=True)
        ],
    }


def _health_view(health: Health) -> dict[str, Any]:
    error_percent = health.error_rate * 100 if health.error_rate is not None else None
    return {**asdict(health), "window_minutes": health.window_seconds / 60,
            "error_percent": error_percent}


@login_required
@require_POST
def model_action(request: HttpRequest, name: str) -> HttpResponse:
    """Promote, roll back, set the canary share or undeploy, from the model page's buttons."""
    model = model_get_for_change(user=request.user, name=name)
    action = request.POST.get("action", "")
    if action in ("promote", "canary"):
        version = model_version_get(
            model=model, version=_posted_number(request, "version"))
        label = ModelLabel.Name.STABLE if action == "promote" else ModelLabel.Name.CANARY
        model_label_set(model=model, label=label, version=version, actor=request.user)
        messages.success(request, f"Version {version.version} is now {label}.")
    elif action == "canary_percent":
        model_settings_update(
            model=model, canary_percent=_posted_number(request, "canary_percent"),
            actor=request.user)
        messages.success(request, "Canary share saved.")
    elif action == "undeploy":
        version = model_version_get(
            model=model, version=_posted_number(request, "version"))
        model_version_undeploy(version=version, actor=request.user)
        messages.success(request, f"Version {version.version} undeployed.")
    else:
        raise InvalidInput("Unknown action.")
    return redirect("model-detail", name=name)


def _posted_number(request: HttpRequest, name: str) -> int:
    value = request.POST.get(name, "")
    if not value.isascii() or not value.isdigit():
        raise InvalidInput(f"{name} must be a whole number.")
    return int(value)


class _InferenceScope:
    """Lets the page's predictions count against the same rate limit as the API's."""

    throttle_scope = "inference"


@login_required
@require_POST
def model_predict_action(request: HttpRequest, name: str) -> HttpResponse:
    """The "try it" box: TF Serving's predict JSON for the session user, CSRF-checked.

    The API's endpoint is for token clients; a session POST of JSON does not pass its CSRF
    check, which reads the body as a form.
    """
    if not ScopedWindowRateThrottle().allow_request(request, _InferenceScope()):  # type: ignore[arg-type]
        return JsonResponse(
            {"error": "Too many predictions; wait a moment.", "code": "too_many_requests"},
            status=429,
        )
    try:
        if int(request.META.get("CONTENT_LENGTH") or 0) > settings.PLATFORM.max_predict_bytes:
            raise PayloadTooLarge(
                f"Request body is larger than {settings.PLATFORM.max_predict_bytes} bytes."
            )
        model = model_route_get(user=request.user, name=name)
        answer = inference_forward(model=model, call="predict", version=None, label=None,
                                   body=request.body)
    except PlatformError as error:
        return JsonResponse(
            {"error": error.message, "code": error.code}, status=error.status_code
        )
    response = HttpResponse(answer.body, status=answer.status, content_type="application/json")
    if answer.version is not None:
        response["X-Model-Version"] = str(answer.version)
    return response
