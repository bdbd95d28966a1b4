"""Workspaces: JupyterLab sessions on scheduled devices.

A session is an Experiment of kind "workspace": the one scheduler queues and places it (pending
reasons, priorities, team GPU quotas, preemption), its trial holds the Allocation rows (GPU-hour
accounting), and stopping it is cancelling it. The workspace itself only names what to start
again: environment, devices, priority, and its owner's home volume, which outlives every session.

Devices: `gpus` whole GPUs on one node, or with none, `cpu_slots` CPU slots on one node. A
session with GPUs holds no CPU slot (a trial's GPU worker does not either), so cpu_slots above 1
with GPUs is refused rather than silently ignored.
"""

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from tfplatform.accounts.models import User
from tfplatform.accounts.tokens import api_token_issue, api_tokens_revoke_named
from tfplatform.audit.services import Actor
from tfplatform.cluster.dispatch import scheduler_wake_on_commit
from tfplatform.core.errors import InvalidInput, InvalidTransition
from tfplatform.experiments import validation
from tfplatform.experiments.models import Environment, Experiment, Trial
from tfplatform.experiments.selectors.environments import environment_default
from tfplatform.experiments.services import admission
from tfplatform.experiments.services.submission import experiment_cancel
from tfplatform.experiments.services.transitions import TERMINAL_STATES
from tfplatform.experiments.sessions import SessionGrant
from tfplatform.notifications.events import EventKind
from tfplatform.notifications.services import event_publish
from tfplatform.workspaces.models import Workspace
from training.catalog import WORKSPACE_JOB

State = Experiment.State
STOP_IDLE = "idle"
STOP_LIFETIME = "lifetime"
STOP_OWNER = "stopped by its owner"
TOKEN_DAYS = 1
SOCKET_FOLDER = ".tfplatform"
MAX_CPU_SLOTS = 64


@dataclass(frozen=True, kw_only=True)
class WorkspaceRequest:
    name: str
    gpus: int = 0
    cpu_slots: int = 1
    # Instead of whole GPUs: a share of one, as a fraction or an amount of its memory.
    gpu_fraction: float | None = None
    gpu_memory_mb: int = 0
    pool: str = ""
    gpu_type: str = ""
    priority: int = 0
    environment: Environment | None = None


def workspace_create(*, owner: User, request: WorkspaceRequest) -> Workspace:
    """A new workspace, started at once (its session queues like any experiment)."""
    gpu_milli = admission.gpu_share_milli(fraction=request.gpu_fraction,
                                          memory_mb=request.gpu_memory_mb,
                                          whole_gpus=request.gpus, field="gpu_fraction")
    shared = bool(gpu_milli or request.gpu_memory_mb)
    if shared and request.cpu_slots > 1:
        raise InvalidInput("A workspace with a share of a GPU holds no CPU slots: ask for "
                           "cpu_slots only without GPUs.", field="cpu_slots")
    _request_check(owner=owner, gpus=request.gpus, cpu_slots=request.cpu_slots,
                   priority=request.priority, pool=request.pool, gpu_type=request.gpu_type,
                   gpu_milli=gpu_milli, gpu_memory_mb=request.gpu_memory_mb)
    if not request.name.strip():
        raise InvalidInput("A workspace needs a name.", field="name")
    environment = _environment_for(environment=request.environment,
                                   gpus=request.gpus or int(shared))
    with transaction.atomic():
        workspace = Workspace.objects.create(
            owner=owner, team_id=owner.team_id, name=request.name.strip(),
            environment=environment, gpus=request.gpus, cpu_slots=request.cpu_slots,
            gpu_milli=gpu_milli, gpu_memory_mb=request.gpu_memory_mb,
            pool=request.pool, gpu_type=request.gpu_type, priority=request.priority,
        )
        _session_start(workspace=workspace)
    return workspace


def workspace_start(*, workspace: Workspace) -> Workspace:
    with transaction.atomic():
        # Locked: two starts at once make one session, and the other is refused.
        locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
        if workspace_session_active(workspace=locked):
            raise InvalidTransition("The workspace is already started.")
        _session_start(workspace=locked)
    workspace.refresh_from_db()
    return workspace


def workspace_stop(*, workspace: Workspace, reason: str = STOP_OWNER,
                   actor: Actor = None) -> Workspace:
    """Stops its session: the devices go back to the queue, the home volume stays. Stopped by
    someone other than its owner (`actor`), it is an audit row, as a cancel is."""
    session = workspace.experiment
    if session is None or session.state in TERMINAL_STATES:
        raise InvalidTransition("The workspace is not started.")
    Workspace.objects.filter(pk=workspace.pk).update(stop_reason=reason)
    experiment_cancel(experiment=session, actor=actor)
    workspace.refresh_from_db()
    return workspace


def workspace_restart(
    *, workspace: Workspace, gpus: int | None = None, cpu_slots: int | None = None
) -> Workspace:
    """A new session, on a new allocation (`gpus`, `cpu_slots` resize it); the home volume is
    kept. Asking for GPUs without naming cpu_slots drops the CPU slots back to 1: the GPUs
    replace them.

    Devices cannot be added to a running process: attaching or detaching them is this restart.
    """
    new_gpus = workspace.gpus if gpus is None else gpus
    if cpu_slots is None:
        cpu_slots = 1 if new_gpus else workspace.cpu_slots
    if (new_gpus, cpu_slots) != (workspace.gpus, workspace.cpu_slots):
        _request_check(owner=workspace.owner, gpus=new_gpus, cpu_slots=cpu_slots,
                       priority=workspace.priority, pool=workspace.pool,
                       gpu_type=workspace.gpu_type if new_gpus else "")
        _environment_for(environment=workspace.environment, gpus=new_gpus)
    replaced = workspace.experiment_id
    if workspace_session_active(workspace=workspace):
        # The old session stops on its own time; the new one queues meanwhile.
        workspace_stop(workspace=workspace, reason="restarted")
    with transaction.atomic():
        locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
        if locked.experiment_id != replaced:
            raise InvalidTransition("The workspace was started meanwhile.")
        if (new_gpus, cpu_slots) != (locked.gpus, locked.cpu_slots):
            # Resized: whole GPUs or CPU slots, as asked, replace a share it had.
            locked.gpus, locked.cpu_slots = new_gpus, cpu_slots
            locked.gpu_milli = locked.gpu_memory_mb = 0
            locked.save(update_fields=["gpus", "cpu_slots", "gpu_milli", "gpu_memory_mb"])
        _session_start(workspace=locked)
    workspace.refresh_from_db()
    return workspace


def workspace_session_active(*, workspace: Workspace) -> bool:
    session = workspace.experiment
    if session is not None:
        session.refresh_from_db(fields=["state"])
    return session is not None and session.state not in TERMINAL_STATES


def _request_check(*, owner: User, gpus: int, cpu_slots: int, priority: int, pool: str,
                   gpu_type: str, gpu_milli: int = 0, gpu_memory_mb: int = 0) -> None:
    validation.priority_check(user=owner, priority=priority)
    limit = settings.PLATFORM.max_gpus_per_worker
    if not 0 <= gpus <= limit:
        raise InvalidInput(f"gpus must be between 0 and {limit}.", field="gpus")
    if not 1 <= cpu_slots <= MAX_CPU_SLOTS:
        raise InvalidInput(f"cpu_slots must be between 1 and {MAX_CPU_SLOTS}.",
                           field="cpu_slots")
    if gpus and cpu_slots > 1:
        raise InvalidInput("A workspace with GPUs holds no CPU slots: ask for cpu_slots only "
                           "with gpus = 0.", field="cpu_slots")
    admission.spark_request_check(pool=pool, workspace=True)
    admission.request_size_check(
        owner=owner, workers=1, gpus_per_worker=gpus, parameter_servers=0,
        cpu_slots_per_worker=cpu_slots, pool=pool, gpu_type=gpu_type, gpu_milli=gpu_milli,
        gpu_memory_mb=gpu_memory_mb,
        fields=admission.SizeFields(gpus="gpus", cpu_slots="cpu_slots", pool="pool",
                                    gpu_type="gpu_type"))


def _environment_for(*, environment: Environment | None, gpus: int) -> Environment | None:
    chosen = environment or environment_default(gpu=gpus > 0)
    if chosen is not None and gpus > 0 and not chosen.gpu_capable:
        raise InvalidInput(
            f"Environment '{chosen.name}' has no GPU support; choose a GPU-capable one.",
            field="environment",
        )
    return chosen


def _session_start(*, workspace: Workspace) -> None:
    """Inside the caller's transaction."""
    admission.owner_lock(owner=workspace.owner)
    admission.workspace_limit_check(owner=workspace.owner, replacing=workspace.experiment_id)
    shared = bool(workspace.gpu_milli or workspace.gpu_memory_mb)
    session = Experiment.objects.create(
        owner=workspace.owner, team_id=workspace.team_id, kind=Experiment.Kind.WORKSPACE,
        name=f"workspace {workspace.name}", environment=workspace.environment,
        model=WORKSPACE_JOB, dataset="", workers=1, gpus_per_worker=workspace.gpus,
        gpu_milli=workspace.gpu_milli, gpu_memory_mb=workspace.gpu_memory_mb, pool=workspace.pool,
        gpu_type=workspace.gpu_type if workspace.gpus or shared else "",
        cpu_slots_per_worker=1 if workspace.gpus or shared else workspace.cpu_slots,
        priority=workspace.priority, max_restarts=0, pending_reason="Waiting for the scheduler.",
    )
    Workspace.objects.filter(pk=workspace.pk).update(
        experiment=session, stop_reason="", last_activity_at=None, ready_at=None
    )
    workspace.experiment, workspace.stop_reason, workspace.last_activity_at = session, "", None
    workspace_home(owner_id=workspace.owner_id).mkdir(parents=True, exist_ok=True)
    scheduler_wake_on_commit()


# What the node and the web app both derive, so neither stores nor sends the other a secret.
def workspace_jupyter_token(*, experiment_id: int) -> str:
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, f"workspace-jupyter:{experiment_id}".encode(), hashlib.sha256).hexdigest()


def workspace_home(*, owner_id: int) -> Path:
    return Path(settings.PLATFORM.home_dir) / f"user-{owner_id}"


def workspace_socket(*, owner_id: int, experiment_id: int) -> Path:
    return workspace_home(owner_id=owner_id) / SOCKET_FOLDER / f"jupyter-{experiment_id}.sock"


def workspace_session_begin(*, trial: Trial) -> SessionGrant:
    """What a session's node hands JupyterLab: a fresh API token of its owner (revoked when the
    session ends), Jupyter's token, its socket and the home volume."""
    experiment = trial.experiment
    workspace = Workspace.objects.filter(experiment=experiment).first()
    token, key = api_token_issue(user=experiment.owner, name=_token_name(trial_id=trial.pk),
                                 days=TOKEN_DAYS)
    Workspace.objects.filter(experiment=experiment).update(
        api_token=token, last_activity_at=timezone.now(), ready_at=None
    )
    socket = workspace_socket(owner_id=experiment.owner_id, experiment_id=experiment.pk)
    socket.parent.mkdir(parents=True, exist_ok=True)
    socket.unlink(missing_ok=True)
    return SessionGrant(
        workspace_id=workspace.pk if workspace else 0, api_token=key,
        jupyter_token=workspace_jupyter_token(experiment_id=experiment.pk),
        socket=str(socket), home=str(workspace_home(owner_id=experiment.owner_id)),
    )


def _token_name(*, trial_id: int) -> str:
    # Per attempt: a restart may have moved the workspace on to a newer session meanwhile.
    return f"workspace session {trial_id}"


def workspace_session_end(*, trial: Trial) -> None:
    """The session's token stops working; the socket goes with it."""
    experiment = trial.experiment
    api_tokens_revoke_named(user_id=experiment.owner_id, name=_token_name(trial_id=trial.pk))
    workspace_socket(owner_id=experiment.owner_id, experiment_id=experiment.pk).unlink(
        missing_ok=True
    )


def workspace_activity_record(*, experiment_id: int, at: datetime) -> None:
    """Jupyter answered its node: the session can be opened, and was last active `at`."""
    Workspace.objects.filter(experiment_id=experiment_id).update(last_activity_at=at)
    Workspace.objects.filter(experiment_id=experiment_id, ready_at__isnull=True).update(
        ready_at=timezone.now())


def workspace_max_lifetime(*, workspace: Workspace) -> timedelta:
    team = workspace.team
    hours = (team.workspace_max_hours if team is not None
             else settings.PLATFORM.user_workspace_max_hours)
    return timedelta(hours=hours)


def workspaces_cull(*, now: datetime | None = None) -> list[int]:
    """Stops running sessions idle longer than PLATFORM_WORKSPACE_IDLE_MINUTES (no kernel or
    terminal activity) or older than their team's maximum lifetime; their devices go back to
    the queue. Returns the workspaces stopped."""
    now = now or timezone.now()
    idle = timedelta(minutes=settings.PLATFORM.workspace_idle_minutes)
    stopped = []
    running = Workspace.objects.select_related("experiment", "team", "owner").filter(
        experiment__state=State.RUNNING
    )
    for workspace in running:
        session = workspace.experiment
        assert session is not None
        reason = ""
        if workspace.last_activity_at is not None and now - workspace.last_activity_at > idle:
            reason = STOP_IDLE
        elif session.started_at is not None and (
                now - session.started_at > workspace_max_lifetime(workspace=workspace)):
            reason = STOP_LIFETIME
        if reason:
            try:
                workspace_stop(workspace=workspace, reason=reason)
            except InvalidTransition:
                continue  # it ended meanwhile
            stopped.append(workspace.pk)
            event_publish(kind=EventKind.WORKSPACE_CULLED, owner_id=workspace.owner_id,
                          team_id=workspace.team_id,
                          payload={"id": workspace.pk, "name": workspace.name, "reason": reason})
    return stopped
