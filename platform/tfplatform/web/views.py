from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from tfplatform.core.errors import NotFound, PlatformError
from tfplatform.experiments import selectors, services
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
        from django.contrib import messages

        messages.error(request, error.message)
    return redirect("experiment-detail", experiment_id=experiment.pk)


def _experiment_or_404(request: HttpRequest, experiment_id: int) -> selectors.Experiment:
    try:
        return selectors.experiment_get(user=request.user, experiment_id=experiment_id)
    except NotFound as error:
        from django.http import Http404

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
