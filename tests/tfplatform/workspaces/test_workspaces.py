"""Workspaces on a real worker node: the session is queued and placed by the scheduler, runs
JupyterLab in the trial sandbox on a Unix socket, keeps its home volume across a stop and a
restart, is the owner's alone, and an idle one is culled so the next queued job gets its GPU."""

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient

from tests import live
from tests.factories import ExperimentFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.accounts.models import ApiToken
from tfplatform.cluster.models import Allocation, Node
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.workspaces.models import Workspace
from tfplatform.workspaces.services import (
    workspace_jupyter_token,
    workspace_socket,
    workspaces_cull,
)
from training.workspace.session import UnixConnection, jupyter_status

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def gpu_node(tmp_path: Path, settings: Any, short_dir: Path,
    platform_settings_override: PlatformSettingsOverride) -> Iterator[Path]:
    # A short folder: a Unix socket's path must fit in 108 bytes.
    homes = short_dir / "h"
    platform_settings_override(home_dir=homes)
    log = tmp_path / "worker.log"
    process = live.worker_start(node=f"ws-{tmp_path.name[-6:]}", log=log, gpu_slots=1,
                                PLATFORM_HOME_DIR=str(homes),
                                PLATFORM_WORK_DIR=str(tmp_path / "work"))
    live.wait_for(lambda: Node.objects.exists(), timeout=90, what="node registration", log=log)
    yield log
    live.stop(process)


def _client(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _running(*, workspace_id: int, log: Path) -> Workspace:
    def ready() -> bool:
        scheduler_pass()
        workspace = Workspace.objects.get(pk=workspace_id)
        session = workspace.experiment
        assert session is not None
        assert session.state != Experiment.State.FAILED, session.error
        socket = workspace_socket(owner_id=workspace.owner_id, experiment_id=session.pk)
        # Ready once its node saw Jupyter answer (the page and the API then say "running").
        return workspace.ready_at is not None and jupyter_status(
            socket=str(socket), token=workspace_jupyter_token(experiment_id=session.pk),
            base_url=f"/workspaces/{workspace_id}/lab/") is not None

    live.wait_for(ready, timeout=180, what="JupyterLab to answer", log=log)
    return Workspace.objects.get(pk=workspace_id)


def _jupyter(workspace: Workspace, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    session = workspace.experiment
    assert session is not None
    socket = workspace_socket(owner_id=workspace.owner_id, experiment_id=session.pk)
    connection = UnixConnection(str(socket))
    headers = {"Authorization": f"token {workspace_jupyter_token(experiment_id=session.pk)}"}
    connection.request(method, f"/workspaces/{workspace.pk}/lab{path}",
                       body=json.dumps(body) if body is not None else None, headers=headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, json.loads(data) if data else None


def _stopped(*, workspace_id: int, log: Path) -> None:
    live.wait_for(
        lambda: Workspace.objects.get(pk=workspace_id).experiment.state  # type: ignore[union-attr]
        == Experiment.State.CANCELED, timeout=90, what="the session to stop", log=log)


def test_workspace_lifecycle_home_and_ownership(gpu_node: Path) -> None:
    owner, other = UserFactory(), UserFactory()
    client = _client(owner)
    answer = client.post("/api/v1/workspaces/", {"name": "explore", "gpus": 1}, format="json")
    assert answer.status_code == 201, answer.content
    workspace_id = answer.json()["id"]
    assert answer.json()["state"] == "queued"
    # The session is no experiment of the owner's list; B sees nothing of it.
    assert client.get("/api/v1/experiments/").json()["count"] == 0
    assert _client(other).get(f"/api/v1/workspaces/{workspace_id}/").status_code == 404
    assert _client(other).post(f"/api/v1/workspaces/{workspace_id}/stop/").status_code == 404
    assert _client(other).get("/api/v1/workspaces/").json()["count"] == 0

    workspace = _running(workspace_id=workspace_id, log=gpu_node)
    detail = client.get(f"/api/v1/workspaces/{workspace_id}/").json()
    assert detail["state"] == "running" and len(detail["devices"]) == 1
    assert "gpu" in detail["devices"][0]
    assert ApiToken.objects.filter(user=owner).count() == 1  # the session's, for `tfp`
    status, _ = _jupyter(workspace, "PUT", "/api/contents/notes.txt",
                         {"type": "file", "format": "text", "content": "kept"})
    assert status in (200, 201)
    home = Path(settings.PLATFORM.home_dir) / f"user-{owner.pk}"
    assert (home / "notes.txt").read_text() == "kept"

    assert client.post(f"/api/v1/workspaces/{workspace_id}/stop/").status_code == 200
    _stopped(workspace_id=workspace_id, log=gpu_node)
    assert not Allocation.objects.filter(released_at__isnull=True).exists()
    assert not ApiToken.objects.filter(user=owner).exists()  # revoked with the session
    assert client.get(f"/api/v1/workspaces/{workspace_id}/").json()["state"] == "stopped"

    assert client.post(f"/api/v1/workspaces/{workspace_id}/start/").status_code == 200
    workspace = _running(workspace_id=workspace_id, log=gpu_node)
    status, found = _jupyter(workspace, "GET", "/api/contents/notes.txt")
    assert status == 200 and found["content"] == "kept"

    # Detaching the GPU is a restart on a new allocation (one CPU slot), the home intact.
    first_session = workspace.experiment_id
    answer = client.post(f"/api/v1/workspaces/{workspace_id}/restart/", {"gpus": 0},
                         format="json")
    assert answer.status_code == 200, answer.content
    workspace = _running(workspace_id=workspace_id, log=gpu_node)
    assert workspace.experiment_id != first_session and workspace.gpus == 0
    detail = client.get(f"/api/v1/workspaces/{workspace_id}/").json()
    assert len(detail["devices"]) == 1 and "cpu" in detail["devices"][0], detail
    status, found = _jupyter(workspace, "GET", "/api/contents/notes.txt")
    assert status == 200 and found["content"] == "kept"
    client.post(f"/api/v1/workspaces/{workspace_id}/stop/")
    _stopped(workspace_id=workspace_id, log=gpu_node)
    assert not ApiToken.objects.filter(user=owner).exists()


def test_idle_workspace_is_culled_and_the_queue_gets_its_gpu(gpu_node: Path) -> None:
    owner = UserFactory()
    answer = _client(owner).post("/api/v1/workspaces/", {"name": "idle", "gpus": 1},
                                 format="json")
    workspace_id = answer.json()["id"]
    _running(workspace_id=workspace_id, log=gpu_node)
    queued = ExperimentFactory(model="pi", dataset="", gpus_per_worker=1,
                               hyperparameters={"pi_samples_per_replica": 1000, "pi_rounds": 1})
    scheduler_pass()
    queued.refresh_from_db()
    assert queued.state == Experiment.State.QUEUED  # the workspace holds the only GPU
    assert workspaces_cull() == []  # active just now
    Workspace.objects.filter(pk=workspace_id).update(
        last_activity_at=timezone.now() - timedelta(
            minutes=settings.PLATFORM.workspace_idle_minutes + 1))
    assert workspaces_cull() == [workspace_id]
    _stopped(workspace_id=workspace_id, log=gpu_node)
    assert Workspace.objects.get(pk=workspace_id).stop_reason == "idle"
    scheduler_pass()
    queued.refresh_from_db()
    assert queued.state != Experiment.State.QUEUED
    held = Allocation.objects.get(trial__experiment=queued)
    assert held.device is not None and held.device.kind == "gpu"
    finished = live.experiment_wait_finished(queued.pk, timeout=120, log=gpu_node)
    assert finished == Experiment.State.COMPLETED


def test_a_session_past_its_teams_lifetime_is_stopped(settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    from tests.factories import TeamFactory
    from tfplatform.experiments.services.transitions import experiment_transition
    from tfplatform.workspaces.services import WorkspaceRequest, workspace_create

    platform_settings_override(workspace_idle_minutes=10_000)
    team = TeamFactory(workspace_max_hours=2)
    owner = UserFactory(team=team)
    workspace = workspace_create(owner=owner, request=WorkspaceRequest(name="long"))
    session = workspace.experiment
    assert session is not None and session.team_id == team.pk
    experiment_transition(experiment=session, to=Experiment.State.SCHEDULED)
    experiment_transition(experiment=session, to=Experiment.State.RUNNING)
    Workspace.objects.filter(pk=workspace.pk).update(last_activity_at=timezone.now())
    assert workspaces_cull() == []
    Experiment.objects.filter(pk=session.pk).update(
        started_at=timezone.now() - timedelta(hours=2, minutes=1))
    assert workspaces_cull() == [workspace.pk]
    workspace.refresh_from_db()
    assert workspace.stop_reason == "lifetime"
    assert workspace.experiment.state == Experiment.State.CANCELED  # type: ignore[union-attr]


def test_workspaces_count_against_the_team_gpu_quota_like_trials() -> None:
    """Placed by the same pass: a trial of the team holds its quota, so the workspace waits
    with the scheduler's reason; it never takes a device a trial holds."""
    from tests.factories import DeviceFactory, NodeFactory, TeamFactory
    from tfplatform.workspaces.services import WorkspaceRequest, workspace_create

    node = NodeFactory()
    for index in range(3):
        DeviceFactory(node=node, index=index)
    team = TeamFactory(gpu_quota=2)
    owner = UserFactory(team=team)
    trial_job = ExperimentFactory(owner=owner, team=team, gpus_per_worker=2)
    scheduler_pass()
    trial_job.refresh_from_db()
    assert trial_job.state == Experiment.State.SCHEDULED
    workspace = workspace_create(owner=owner, request=WorkspaceRequest(name="q", gpus=1))
    scheduler_pass()
    session = Experiment.objects.get(pk=workspace.experiment_id)
    assert session.state == Experiment.State.QUEUED
    assert "Team quota of 2 GPUs: 2 in use" in session.pending_reason
    detail = _client(owner).get(f"/api/v1/workspaces/{workspace.pk}/").json()
    assert detail["state"] == "queued" and "Team quota" in detail["pending_reason"]
    team.gpu_quota = 3
    team.save()
    scheduler_pass()
    session.refresh_from_db()
    assert session.state == Experiment.State.SCHEDULED
    held = Allocation.objects.get(trial__experiment=session, released_at__isnull=True)
    trial_held = set(Allocation.objects.filter(trial__experiment=trial_job)
                     .values_list("device_id", flat=True))
    assert held.device_id not in trial_held
