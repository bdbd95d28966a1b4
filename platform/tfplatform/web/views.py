"""Model pages, error pages and the health check."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from tfplatform.core.errors import NotFound, PayloadTooLarge, PlatformError
from tfplatform.core.throttling import ScopedWindowRateThrottle
from tfplatform.modelregistry import selectors as model_selectors
from tfplatform.modelregistry import services as model_services
from tfplatform.modelregistry.inference import inference_predict


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"error": "Not found."}, status=404)
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"error": "Internal server error."}, status=500)
    return render(request, "500.html", status=500)


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and compose: answers only if the database does."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


@login_required
def model_list_page(request: HttpRequest) -> HttpResponse:
    models = model_selectors.model_list(user=request.user).prefetch_related("versions", "labels")
    return render(request, "models/list.html", {"models": models})


@login_required
def model_detail_page(request: HttpRequest, name: str) -> HttpResponse:
    try:
        model = model_selectors.model_get(user=request.user, name=name)
    except NotFound as error:
        raise Http404(error.message) from error
    labels = model_selectors.model_label_versions(model=model)
    versions = [
        {"version": v, "labels": [label for label, n in labels.items() if n == v.version]}
        for v in model.versions.order_by("-version")
    ]
    context = {
        "model": model,
        "versions": versions,
        "labels": labels,
        "can_change": model_services.model_can_change(user=request.user, model=model),  # type: ignore[arg-type]
        "loading": model_selectors.model_loading(model=model),
    }
    return render(request, "models/detail.html", context)


@login_required
@require_POST
def model_action(request: HttpRequest, name: str) -> HttpResponse:
    """Promote, roll back, set the canary share or undeploy, from the model page's buttons."""
    try:
        model = model_selectors.model_get_for_change(user=request.user, name=name)
        action = request.POST.get("action", "")
        if action in ("promote", "canary"):
            version = model_selectors.model_version_get(
                model=model, version=int(request.POST.get("version", "0"))
            )
            label = "stable" if action == "promote" else "canary"
            model_services.model_label_set(model=model, label=label, version=version)
            messages.success(request, f"Version {version.version} is now {label}.")
        elif action == "canary_percent":
            model_services.model_settings_update(
                model=model, canary_percent=int(request.POST.get("canary_percent", "0"))
            )
            messages.success(request, "Canary share saved.")
        elif action == "undeploy":
            version = model_selectors.model_version_get(
                model=model, version=int(request.POST.get("version", "0"))
            )
            model_services.model_version_undeploy(version=version)
            messages.success(request, f"Version {version.version} undeployed.")
        else:
            messages.error(request, "Unknown action.")
    except NotFound as error:
        raise Http404(error.message) from error
    except (PlatformError, ValueError) as error:
        messages.error(request, getattr(error, "message", str(error)))
    return redirect("model-detail", name=name)


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
        return JsonResponse({"error": "Too many predictions; wait a moment."}, status=429)
    try:
        if int(request.META.get("CONTENT_LENGTH") or 0) > settings.PLATFORM["MAX_PREDICT_BYTES"]:
            raise PayloadTooLarge(
                f"Request body is larger than {settings.PLATFORM['MAX_PREDICT_BYTES']} bytes."
            )
        model = model_selectors.model_route_get(user=request.user, name=name)
        answer = inference_predict(model=model, version=None, label=None, body=request.body)
    except PlatformError as error:
        return JsonResponse({"error": error.message}, status=error.status_code)
    response = HttpResponse(answer.body, status=answer.status, content_type="application/json")
    if answer.version is not None:
        response["X-Model-Version"] = str(answer.version)
    return response
