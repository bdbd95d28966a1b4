"""Reads of workspaces: the owner's list, one workspace, its state, devices and lab address."""

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet

from tfplatform.accounts.models import User
from tfplatform.cluster.models import Allocation
from tfplatform.core.errors import NotFound
from tfplatform.experiments.models import Experiment
from tfplatform.workspaces.models import Workspace


def workspace_list(*, user: User | AnonymousUser) -> QuerySet[Workspace]:
    """Only the owner's: a workspace holds their home volume and their API token."""
    if not user.is_authenticated:
        return Workspace.objects.none()
    return Workspace.objects.filter(owner=user).select_related(
        "owner", "environment", "experiment")


def workspace_get(*, user: User | AnonymousUser, workspace_id: int) -> Workspace:
    workspace = workspace_list(user=user).filter(pk=workspace_id).first()
    if workspace is None:
        raise NotFound("Workspace not found.")
    return workspace


WORKSPACE_STATES: dict[str, str] = {
    Experiment.State.QUEUED: "queued", Experiment.State.SCHEDULED: "starting",
    Experiment.State.RUNNING: "running", Experiment.State.COMPLETED: "stopped",
    Experiment.State.CANCELED: "stopped", Experiment.State.FAILED: "failed",
}


def workspace_state(*, workspace: Workspace) -> str:
    session = workspace.experiment
    if session is None:
        return "stopped"
    if session.state == Experiment.State.RUNNING and session.trials.filter(
            stop_reason__gt="", state__in=("pending", "running")).exists():
        return "stopping"
    if session.state == Experiment.State.RUNNING and workspace.ready_at is None:
        return "starting"  # its Jupyter has not answered yet
    return WORKSPACE_STATES.get(session.state, session.state)


def workspace_lab_url(*, workspace: Workspace) -> str:
    """Where its JupyterLab is reached: the `lab` process' origin when it has one of its own
    (`make run`: PORT+100), else a path on the platform's own origin (compose's TLS proxy)."""
    return f"{settings.PLATFORM.workspace_lab_origin}/workspaces/{workspace.pk}/lab/"


def workspace_devices(*, workspace: Workspace) -> list[str]:
    """The devices its session holds now, e.g. ["node-1/gpu:0"]."""
    session = workspace.experiment
    if session is None:
        return []
    held = Allocation.objects.filter(trial__experiment=session, released_at__isnull=True)
    return [str(a.device or a.node) for a in held.select_related("device__node", "node")]
