"""GET /api/v1/audit/: staff only, filtered by actor, action, object and time, paginated, and
documented in the OpenAPI schema."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import NodeFactory, UserFactory
from tfplatform.accounts.models import User
from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import audit_record

pytestmark = pytest.mark.django_db


def api(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def log() -> dict[str, Any]:
    root, ops = UserFactory(username="root", is_staff=True), UserFactory(username="ops",
                                                                         is_staff=True)
    box, spare = NodeFactory(hostname="box"), NodeFactory(hostname="spare")
    for actor, action, node in ((root, AuditAction.NODE_CORDON, box),
                                (ops, AuditAction.NODE_DRAIN, spare),
                                (ops, AuditAction.NODE_ENABLE, box),
                                (None, AuditAction.NODE_STATE_CHANGE, spare)):
        audit_record(actor=actor, action=action, target=node, before={"state": "ready"},
                     after={"state": "changed"})
    return {"root": root, "box": box}


def actions(response: Any) -> list[str]:
    return [entry["action"] for entry in response.json()["results"]]


def test_only_staff_read_the_log(log: dict[str, Any]) -> None:
    assert api(None).get("/api/v1/audit/").status_code == 401
    refused = api(UserFactory()).get("/api/v1/audit/")
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"
    shown = api(log["root"]).get("/api/v1/audit/")
    assert shown.status_code == 200
    newest = shown.json()["results"][0]
    assert newest["actor"] == "" and newest["action"] == "node.state_change"
    assert set(newest) == {"id", "created_at", "actor", "action", "object_type", "object_id",
                           "object_repr", "before", "after", "client_address"}
    # Newest first; nothing in the API writes it.
    assert actions(shown) == ["node.state_change", "node.enable", "node.drain", "node.cordon"]
    assert api(log["root"]).post("/api/v1/audit/", {}).status_code == 405


def test_filters_by_actor_action_object_and_time(log: dict[str, Any]) -> None:
    client, box = api(log["root"]), log["box"]

    def found(**query: Any) -> list[str]:
        response = client.get("/api/v1/audit/", query)
        assert response.status_code == 200, response.content
        return actions(response)

    assert found(actor="ops") == ["node.enable", "node.drain"]
    assert found(action=["node.cordon", "node.drain"]) == ["node.drain", "node.cordon"]
    assert found(object_type="cluster.node", object_id=box.pk) == ["node.enable", "node.cordon"]
    now = timezone.now()
    assert len(found(since=(now - timedelta(minutes=5)).isoformat())) == 4
    assert found(until=(now - timedelta(minutes=5)).isoformat()) == []
    assert found(actor="nobody") == []
    page = client.get("/api/v1/audit/", {"limit": 1, "offset": 1}).json()
    assert page["count"] == 4 and [e["action"] for e in page["results"]] == ["node.enable"]


@pytest.mark.parametrize("query", [{"action": "node.explode"}, {"since": "yesterday"},
                                   {"actor": "x" * 151}, {"limit": "many"}])
def test_a_malformed_filter_is_a_400(log: dict[str, Any], query: dict[str, str]) -> None:
    response = api(log["root"]).get("/api/v1/audit/", query)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_input"


def test_the_openapi_schema_documents_the_log_and_its_filters() -> None:
    schema = api(UserFactory()).get("/api/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/v1/audit/"]["get"]
    parameters = {p["name"] for p in operation["parameters"]}
    assert {"actor", "action", "object_type", "object_id", "since", "until", "limit",
            "offset"} <= parameters
    assert {"200", "401", "403", "400"} <= set(operation["responses"])
