from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from tfplatform.core.errors import NotFound, PlatformError
from tfplatform.experiments import selectors, services
from tfplatform.modelregistry import selectors as model_selectors
from tfplatform.modelregistry import services as model_services
from tfplatform.web.forms import ExperimentForm

ACTIVE_STATES = ("queued", "scheduled", "running")


@login_required
def experiment_list_page(request: HttpRequest) -> HttpResponse:
    experiments = selectors.experiment_list(user=request.user)
    state = request.GET.get("state")
    if state:
        experiments = experiments.filter(state=state)
    return render(
        request, "experiments/list.html", {"experiments": experiments[:200], "state": state}
    )


@login_required
def experiment_new_page(request: HttpRequest) -> HttpResponse:
    form = ExperimentForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        try:
            experiment = services.experiment_create(
                owner=request.user,  # type: ignore[arg-type]
                request=services.ExperimentRequest(**form.request_kwargs()),
            )
        except PlatformError as error:
            # Business errors land on the field they concern, like any other form error.
            form.add_error(_form_field(error.field), error.message)
        else:
            return redirect("experiment-detail", experiment_id=experiment.pk)
    return render(request, "experiments/new.html", {"form": form})


def _form_field(field: str | None) -> str | None:
    if field in ("resources", "hyperparameters"):
        return None
    return field if field in ExperimentForm.base_fields else None


@login_required
def experiment_detail_page(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = _experiment_or_404(request, experiment_id)
    context = {
        "experiment": experiment,
        "trials": selectors.experiment_trials(experiment=experiment),
        "metrics": selectors.experiment_metrics(experiment=experiment).order_by("-recorded_at")[
            :50
        ],
        "logs": selectors.experiment_logs(experiment=experiment, tail_lines=40),
        "active": experiment.state in ACTIVE_STATES,
    }
    return render(request, "experiments/detail.html", context)


@login_required
@require_POST
def experiment_cancel_action(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = _experiment_or_404(request, experiment_id)
    try:
        services.experiment_cancel(experiment=experiment)
    except PlatformError as error:
        messages.error(request, error.message)
    return redirect("experiment-detail", experiment_id=experiment.pk)


def _experiment_or_404(request: HttpRequest, experiment_id: int) -> selectors.Experiment:
    try:
        return selectors.experiment_get(user=request.user, experiment_id=experiment_id)
    except NotFound as error:
        raise Http404(error.message) from error


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


@login_required
@require_POST
def experiment_deploy_action(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = _experiment_or_404(request, experiment_id)
    name = request.POST.get("model_name", "").strip()
    try:
        version = model_services.experiment_deploy(
            user=request.user,  # type: ignore[arg-type]
            experiment=experiment,
            model_name=name,
        )
    except PlatformError as error:
        messages.error(request, error.message)
        return redirect("experiment-detail", experiment_id=experiment.pk)
    messages.success(request, f"Deployed as {name} version {version.version}.")
    return redirect("model-detail", name=name)
