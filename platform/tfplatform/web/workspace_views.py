"""Workspace pages: the owner's workspaces (state, devices, pending reason, Open), the start
form, and stop, start and resize (a restart on a new allocation) actions."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.views.decorators.http import require_POST

from tfplatform.core.errors import InvalidInput, PlatformError
from tfplatform.web.forms import WorkspaceForm, WorkspaceResizeForm
from tfplatform.workspaces import selectors as workspace_selectors
from tfplatform.workspaces import services as workspaces
from tfplatform.workspaces.models import Workspace

REFRESH_STATES = ("queued", "starting", "stopping")


@login_required
def workspace_list_page(request: HttpRequest) -> HttpResponse:
    form = WorkspaceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            workspace = workspaces.workspace_create(
                owner=request.user,  # type: ignore[arg-type]
                request=workspaces.WorkspaceRequest(**form.cleaned_data),
            )
        except PlatformError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
        else:
            messages.success(request, f"Workspace '{workspace.name}' is starting.")
            return redirect("workspace-list")
    rows = [
        {"workspace": w, "state": workspace_selectors.workspace_state(workspace=w),
         "devices": workspace_selectors.workspace_devices(workspace=w)}
        for w in workspace_selectors.workspace_list(user=request.user)
    ]
    refresh = any(row["state"] in REFRESH_STATES for row in rows)
    return render(request, "workspaces/list.html", {
        "rows": rows, "form": form, "resize_form": WorkspaceResizeForm(), "refresh": refresh,
        "lab_origin": settings.PLATFORM.workspace_lab_origin,
        "max_cpu_slots": workspaces.MAX_CPU_SLOTS,
    })


@login_required
@require_POST
def workspace_stop_action(request: HttpRequest, workspace_id: int) -> HttpResponse:
    workspace = workspace_selectors.workspace_get(user=request.user, workspace_id=workspace_id)
    workspaces.workspace_stop(workspace=workspace, actor=request.user)
    messages.success(request, f"Workspace '{workspace.name}' is stopping; its home is kept.")
    return redirect("workspace-list")


@login_required
@require_POST
def workspace_start_action(request: HttpRequest, workspace_id: int) -> HttpResponse:
    workspace = workspace_selectors.workspace_get(user=request.user, workspace_id=workspace_id)
    workspaces.workspace_start(workspace=workspace)
    messages.success(request, f"Workspace '{workspace.name}' is starting.")
    return redirect("workspace-list")


@login_required
@require_POST
def workspace_resize_action(request: HttpRequest, workspace_id: int) -> HttpResponse:
    workspace = workspace_selectors.workspace_get(user=request.user, workspace_id=workspace_id)
    form = WorkspaceResizeForm(request.POST)
    if not form.is_valid():
        messages.error(request, "GPUs must be a whole number from 0 to 16, CPU slots from 1 to "
                       f"{workspaces.MAX_CPU_SLOTS}.")
        return redirect("workspace-list")
    try:
        restarted = workspaces.workspace_restart(workspace=workspace,
                                                 gpus=form.cleaned_data["gpus"],
                                                 cpu_slots=form.cleaned_data["cpu_slots"])
    except InvalidInput as error:
        messages.error(request, error.message)
        return redirect("workspace-list")
    messages.success(
        request, f"Workspace '{workspace.name}' restarts with {_devices_text(restarted)}: "
        "running kernels end, files in its home are kept.")
    return redirect("workspace-list")


def _devices_text(workspace: Workspace) -> str:
    if workspace.gpus:
        return f"{workspace.gpus} GPU{pluralize(workspace.gpus)}"
    return f"{workspace.cpu_slots} CPU slot{pluralize(workspace.cpu_slots)}"
