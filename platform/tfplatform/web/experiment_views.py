"""Experiment pages: list, launch form, detail with live status and charts, and their actions."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from tfplatform.cluster import selectors as cluster_selectors
from tfplatform.core.errors import PlatformError
from tfplatform.core.notes import note_render
from tfplatform.experiments import artifacts
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.selectors.experiments import (
    experiment_get,
    experiment_logs,
    experiment_unisolated_nodes,
)
from tfplatform.experiments.selectors.lineage import experiment_lineage
from tfplatform.experiments.selectors.progress import (
    ACTIVE_STATES,
    experiment_chart_points,
    experiment_epochs_done,
)
from tfplatform.experiments.selectors.scheduling import (
    experiment_devices_held,
    experiment_queue_position,
    experiments_queued_ahead,
)
from tfplatform.experiments.selectors.trials import experiment_trials
from tfplatform.experiments.services import submission
from tfplatform.modelregistry.services.publish import experiment_deploy
from tfplatform.searches import selectors as search_selectors
from tfplatform.web.forms import ExperimentForm, ResourcesFitForm, hyperparameter_defaults

LOG_TAIL_LINES = 60


@login_required
def experiment_new_page(request: HttpRequest) -> HttpResponse:
    form = ExperimentForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        try:
            experiment = submission.experiment_create(
                owner=request.user,  # type: ignore[arg-type]
                request=submission.ExperimentRequest(**form.request_kwargs()),
            )
        except PlatformError as error:
            # Business errors land on the field they concern, like any other form error.
            form.add_error(_form_field(error.field), error.message)
        else:
            return redirect("experiment-detail", experiment_id=experiment.pk)
    resources = ResourcesFitForm(request.POST or None)
    context = {
        "form": form,
        "defaults": hyperparameter_defaults(),
        **_resources_outlook(request=request, form=resources),
    }
    return render(request, "experiments/new.html", context)


@login_required
@require_GET
def experiment_fit_fragment(request: HttpRequest) -> HttpResponse:
    """What is free now and whether the requested size could start: the form's side panel."""
    form = ResourcesFitForm(request.GET)
    context = _resources_outlook(request=request, form=form)
    status = 200 if form.is_valid() else 400
    return render(request, "experiments/_resources.html", context, status=status)


def _resources_outlook(*, request: HttpRequest, form: ResourcesFitForm) -> dict[str, Any]:
    values = (
        form.cleaned_data
        if form.is_bound and form.is_valid()
        else {name: form[name].initial for name in form.fields}
    )
    capacity = cluster_selectors.capacity_now(pool=values.get("pool") or "",
                                              gpu_type=values.get("gpu_type") or "")
    quota = cluster_selectors.team_quota(team_id=getattr(request.user, "team_id", None))
    context: dict[str, Any] = {"capacity": capacity, "quota": quota, "resources_form": form}
    if not form.is_bound or form.is_valid():
        context["fit"] = cluster_selectors.resources_fit(
            capacity=capacity,
            quota=quota,
            workers=values["workers"],
            gpus_per_worker=values["gpus_per_worker"],
            parameter_servers=values["parameter_servers"],
            queued_ahead=experiments_queued_ahead(priority=values["priority"]),
            gpu_milli=values.get("gpu_milli") or 0,
            gpu_memory_mb=values.get("gpu_memory_mb") or 0,
            workers_min=values.get("min_workers") or 0,
            gpus_per_worker_min=values.get("min_gpus_per_worker") or 0,
        )
    return context


def _form_field(field: str | None) -> str | None:
    if field in ("resources", "hyperparameters"):
        return None
    return field if field in ExperimentForm.base_fields else None


@login_required
@require_GET
def experiment_detail_page(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = experiment_get(user=request.user, experiment_id=experiment_id)
    context = {**_live_context(experiment=experiment),
               "artifacts": artifacts.artifacts_list(experiment=experiment),
               "search_trial": search_selectors.search_trial_of(experiment=experiment),
               "note_html": note_render(note=experiment.note),
               "tags": [tag.name for tag in experiment.tags.all()],
               "lineage": experiment_lineage(user=request.user, experiment=experiment)}
    return render(request, "experiments/detail.html", context)


@login_required
@require_GET
def experiment_artifact_download(
    request: HttpRequest, experiment_id: int, name: str
) -> StreamingHttpResponse:
    experiment = experiment_get(user=request.user, experiment_id=experiment_id)
    return artifacts.artifact_response(experiment=experiment, name=name)


@login_required
@require_GET
def experiment_live_fragment(request: HttpRequest, experiment_id: int) -> HttpResponse:
    """The detail page's changing parts, polled by htmx while the experiment is active."""
    experiment = experiment_get(user=request.user, experiment_id=experiment_id)
    return render(request, "experiments/_live_fragment.html", _live_context(experiment=experiment))


@login_required
@require_GET
def experiment_chart_json(request: HttpRequest, experiment_id: int) -> JsonResponse:
    """Metric points after the `after` cursor, for the detail page's charts to append."""
    experiment = experiment_get(user=request.user, experiment_id=experiment_id)
    after = request.GET.get("after", "0")
    if not (after.isascii() and after.isdigit() and len(after) <= 18):
        return JsonResponse({"error": "after must be a whole number."}, status=400)
    points = experiment_chart_points(experiment=experiment, after=int(after))
    return JsonResponse(
        {
            "state": experiment.state,
            "finished": experiment.state not in ACTIVE_STATES,
            "cursor": points.cursor,
            "more": points.more,
            "epochs": points.epochs,
            "images_per_sec": points.images_per_sec,
            "images_per_sec_epoch": points.images_per_sec_epoch,
        }
    )


def _live_context(*, experiment: Experiment) -> dict[str, Any]:
    return {
        "experiment": experiment,
        "active": experiment.state in ACTIVE_STATES,
        "epochs_done": experiment_epochs_done(experiment=experiment),
        "epochs_planned": int(experiment.hyperparameters.get("epochs") or 0),
        "queue_position": experiment_queue_position(experiment=experiment),
        "devices": experiment_devices_held(experiment=experiment),
        "trials": experiment_trials(experiment=experiment),
        "logs": experiment_logs(experiment=experiment, tail_lines=LOG_TAIL_LINES),
        "log_lines": LOG_TAIL_LINES,
        "unisolated_nodes": experiment_unisolated_nodes(experiment=experiment),
        "deployable": experiment.state == Experiment.State.COMPLETED
        and bool((experiment.results or {}).get("exported")),
    }


@login_required
@require_POST
def experiment_cancel_action(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = experiment_get(user=request.user, experiment_id=experiment_id)
    submission.experiment_cancel(experiment=experiment, actor=request.user)
    return redirect("experiment-detail", experiment_id=experiment.pk)


@login_required
@require_POST
def experiment_restart_action(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = experiment_get(user=request.user, experiment_id=experiment_id)
    restarted = submission.experiment_restart(
        user=request.user,  # type: ignore[arg-type]
        experiment=experiment,
    )
    messages.success(request, f"Running #{experiment.pk} again as #{restarted.pk}.")
    return redirect("experiment-detail", experiment_id=restarted.pk)


@login_required
@require_POST
def experiment_deploy_action(request: HttpRequest, experiment_id: int) -> HttpResponse:
    experiment = experiment_get(user=request.user, experiment_id=experiment_id)
    name = request.POST.get("model_name", "").strip()
    version = experiment_deploy(
        user=request.user,  # type: ignore[arg-type]
        experiment=experiment,
        model_name=name,
        tflite=request.POST.get("tflite") == "on",
    )
    messages.success(request, f"Deploying as {name} version {version.version}: it is loading.")
    return redirect("model-detail", name=name)

