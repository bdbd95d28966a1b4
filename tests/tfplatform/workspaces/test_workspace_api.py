"""The workspace API's CPU slots: bounds and the GPU rule as 400s with field errors, restarts
that resize them, the schema that documents them, and another user's 404; a failed session's
reason."""

from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import TrialFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.execution import trial_fail_orphaned
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.workspaces.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def homes(tmp_path: Path, settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(home_dir=tmp_path / "homes")


def _client(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.mark.parametrize(("body", "words"), [
    ({"cpu_slots": 0}, "greater than or equal to 1"),
    ({"cpu_slots": 65}, "less than or equal to 64"),
    ({"cpu_slots": "many"}, "valid integer"),
    ({"gpus": 1, "cpu_slots": 2}, "holds no CPU slots"),
])
def test_bad_cpu_slots_are_a_field_error(body: dict[str, Any], words: str) -> None:
    answer = _client(UserFactory()).post("/api/v1/workspaces/", {"name": "w", **body},
                                         format="json")
    assert answer.status_code == 400
    assert words in str(answer.json()["cpu_slots"])
    assert not Workspace.objects.exists()


def test_cpu_slots_are_asked_for_resized_and_the_owners_alone() -> None:
    alice = _client(UserFactory())
    answer = alice.post("/api/v1/workspaces/", {"name": "w", "cpu_slots": 3}, format="json")
    assert answer.status_code == 201, answer.json()
    assert (answer.json()["gpus"], answer.json()["cpu_slots"]) == (0, 3)
    workspace = Workspace.objects.get()
    assert workspace.experiment is not None
    assert workspace.experiment.cpu_slots_per_worker == 3
    assert "Waiting for the scheduler" in answer.json()["pending_reason"]

    restart = f"/api/v1/workspaces/{workspace.pk}/restart/"
    assert alice.post(restart, {"cpu_slots": 0}, format="json").json()["cpu_slots"]
    answer = alice.post(restart, {"cpu_slots": 5}, format="json")
    assert answer.status_code == 200 and answer.json()["cpu_slots"] == 5
    answer = alice.post(restart, {"gpus": 1, "cpu_slots": 2}, format="json")
    assert answer.status_code == 400 and "cpu_slots" in answer.json()
    workspace.refresh_from_db()
    assert (workspace.gpus, workspace.cpu_slots) == (0, 5)

    bob = _client(UserFactory())
    assert bob.post(restart, {"cpu_slots": 1}, format="json").status_code == 404
    assert bob.get(f"/api/v1/workspaces/{workspace.pk}/").status_code == 404
    assert bob.get("/api/v1/workspaces/").json()["results"] == []
    workspace.refresh_from_db()
    assert workspace.cpu_slots == 5


def test_the_schema_documents_cpu_slots() -> None:
    schemas = APIClient().get("/api/schema/?format=json").json()["components"]["schemas"]
    assert schemas["WorkspaceCreateRequest"]["properties"]["cpu_slots"]["maximum"] == 64
    assert schemas["WorkspaceRestartRequest"]["properties"]["cpu_slots"]["minimum"] == 1
    assert "cpu_slots" in schemas["Workspace"]["properties"]


def test_the_lab_url_names_the_lab_processs_own_origin_when_it_has_one(settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    """`make run` (PORT+100) and compose (8443) serve the lab on its own origin: a path on the
    API's origin would be a 404 there."""
    alice = _client(UserFactory())
    answer = alice.post("/api/v1/workspaces/", {"name": "w"}, format="json")
    workspace_id = answer.json()["id"]
    assert answer.json()["lab_url"] == f"/workspaces/{workspace_id}/lab/"  # no lab origin set
    platform_settings_override(workspace_lab_origin="http://127.0.0.1:8100")
    found = alice.get(f"/api/v1/workspaces/{workspace_id}/").json()
    assert found["lab_url"] == f"http://127.0.0.1:8100/workspaces/{workspace_id}/lab/"


def test_a_failed_session_says_why_to_its_owner_only() -> None:
    """A workspace whose node restarted under it: `failed`, and the reason with it."""
    alice = UserFactory()
    created = _client(alice).post("/api/v1/workspaces/", {"name": "w"}, format="json").json()
    session = Workspace.objects.get(pk=created["id"]).experiment
    assert session is not None
    experiment_transition(experiment=session, to=Experiment.State.SCHEDULED)
    experiment_transition(experiment=session, to=Experiment.State.RUNNING)
    trial = TrialFactory(experiment=session, state="running")
    trial_fail_orphaned(trial_id=trial.pk, reason="The worker node restarted mid-trial.")

    found = _client(alice).get(f"/api/v1/workspaces/{created['id']}/").json()
    assert found["state"] == "failed"
    assert "The worker node restarted mid-trial." in found["error"], found
    assert _client(UserFactory()).get(f"/api/v1/workspaces/{created['id']}/").status_code == 404
