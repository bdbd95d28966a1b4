"""The workspace page's CPU slots: asked for in the start form, shown, resized by a restart;
the GPU rule as the field's error; another user's workspace is not found."""

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.workspaces.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def homes(tmp_path: Path, settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(home_dir=tmp_path / "homes")


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_cpu_slots_from_the_workspace_page() -> None:
    alice = _client(UserFactory())
    form = {"name": "wide", "environment": "", "gpus": "0", "cpu_slots": "4", "priority": "0"}
    assert alice.post("/workspaces/", form).status_code == 302
    workspace = Workspace.objects.get()
    assert workspace.cpu_slots == 4
    assert "4 CPU slots asked" in alice.get("/workspaces/").content.decode()

    refused = alice.post("/workspaces/", {**form, "name": "gpu", "gpus": "1", "cpu_slots": "2"})
    assert refused.status_code == 200
    assert "holds no CPU slots" in str(refused.context["form"].errors["cpu_slots"])
    assert not Workspace.objects.filter(name="gpu").exists()

    resize = f"/workspaces/{workspace.pk}/resize/"
    page = alice.post(resize, {"gpus": "0", "cpu_slots": "2"}, follow=True).content.decode()
    assert "restarts with 2 CPU slots" in page
    workspace.refresh_from_db()
    assert workspace.cpu_slots == 2
    page = alice.post(resize, {"gpus": "1", "cpu_slots": "3"}, follow=True).content.decode()
    assert "holds no CPU slots" in page
    workspace.refresh_from_db()
    assert (workspace.gpus, workspace.cpu_slots) == (0, 2)

    bob = _client(UserFactory())
    assert bob.post(resize, {"gpus": "0", "cpu_slots": "1"}).status_code == 404
