"""The operators' health page and `GET /api/v1/health/`: every component as the web app finds
it, against the real ones (PostgreSQL, Redis as broker and cache, the embedded model server);
one that is down says why, and the page still answers."""

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests import live
from tests.factories import NodeFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.cluster.models import Node
from tfplatform.cluster.utilization import utilization_record

pytestmark = pytest.mark.django_db

COMPONENTS = ["database", "broker", "cache", "scheduler", "worker nodes", "model server",
              "storage"]


def _health(api_client: APIClient) -> tuple[str, dict[str, dict[str, Any]]]:
    api_client.force_authenticate(UserFactory(is_staff=True))
    answer = api_client.get("/api/v1/health/")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert [c["name"] for c in body["components"]] == COMPONENTS
    return body["status"], {c["name"]: c for c in body["components"]}


@pytest.fixture
def served(model_server_process: dict[str, Any],
           platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(tf_serving_grpc=model_server_process["grpc"],
                               tf_serving_rest=model_server_process["rest"])


def test_a_healthy_deployment_is_ok_component_by_component(api_client: APIClient,
                                                           served: None) -> None:
    NodeFactory(hostname="gpu-1")
    utilization_record(queued=0, running=0)  # what the scheduler does every few seconds
    overall, found = _health(api_client)
    assert overall == "ok", found
    assert {c["status"] for c in found.values()} == {"ok"}
    assert found["database"]["detail"].endswith("every migration applied")
    assert found["worker nodes"]["detail"].startswith("1 ready of 1")
    assert "GiB free" in found["storage"]["detail"]


def test_what_is_down_or_missing_says_why_and_the_page_still_answers(
    api_client: APIClient, settings: Any, platform_settings_override: PlatformSettingsOverride,
) -> None:
    closed = live.free_port()  # nothing listens there
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed}/0"
    platform_settings_override(tf_serving_rest=f"http://127.0.0.1:{closed}",
                               tf_serving_grpc=f"127.0.0.1:{closed}")
    NodeFactory(hostname="gone-1", state=Node.State.LOST,
                last_heartbeat=timezone.now() - timedelta(hours=1))
    NodeFactory(hostname="quiet-1", last_heartbeat=timezone.now() - timedelta(hours=1))
    overall, found = _health(api_client)
    assert overall == "down"
    assert found["database"]["status"] == found["cache"]["status"] == "ok"
    assert found["broker"]["status"] == "down" and found["broker"]["detail"]
    assert found["model server"]["status"] == "down" and found["model server"]["detail"]
    assert found["scheduler"]["status"] == "down"
    assert "is `manage.py scheduler` running?" in found["scheduler"]["detail"]
    assert found["worker nodes"] == {**found["worker nodes"], "status": "down"}
    assert "gone-1" not in found["worker nodes"]["detail"]  # no node takes trials: down
    NodeFactory(hostname="fine-1")
    _, found = _health(api_client)
    assert found["worker nodes"]["status"] == "degraded"
    assert found["worker nodes"]["detail"].endswith("gone-1, quiet-1")


def test_an_upgrade_half_done_is_degraded_saying_what_to_run(api_client: APIClient) -> None:
    from django.db import connection
    from django.db.migrations.loader import MigrationLoader
    from django.db.migrations.recorder import MigrationRecorder

    # As after new code started on the old schema: one app's newest migration is not in the
    # database yet.
    (newest,) = [node for node in MigrationLoader(connection).graph.leaf_nodes()
                 if node[0] == "searches"]
    MigrationRecorder(connection).record_unapplied(*newest)
    _, found = _health(api_client)
    assert found["database"]["status"] == "degraded"
    assert found["database"]["detail"] == "1 migration(s) not applied: run manage.py migrate"


def test_a_silent_scheduler_is_down(api_client: APIClient) -> None:
    sample = utilization_record(queued=0, running=0)
    sample.recorded_at = timezone.now() - timedelta(minutes=5)
    sample.save(update_fields=["recorded_at"])
    _, found = _health(api_client)
    assert found["scheduler"]["status"] == "down"
    assert found["scheduler"]["detail"].startswith("last sample 300 s ago")


def test_only_staff_see_it(api_client: APIClient, client: Client) -> None:
    user = UserFactory()
    api_client.force_authenticate(user)
    answer = api_client.get("/api/v1/health/")
    assert answer.status_code == 403 and set(answer.json()) == {"error", "code"}
    client.force_login(user)
    assert client.get("/cluster/health/").status_code == 404
    client.logout()
    assert client.get("/cluster/health/")["Location"].startswith("/login/")


def test_the_page_lists_every_component(client: Client, served: None) -> None:
    client.force_login(UserFactory(is_staff=True))
    page = client.get("/cluster/health/").content.decode()
    for name in COMPONENTS:
        assert f'data-component="{name}"' in page
    assert 'id="overall"' in page
    assert "/cluster/health/" in client.get("/cluster/").content.decode()
