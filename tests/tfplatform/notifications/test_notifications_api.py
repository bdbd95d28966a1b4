"""/api/v1/notifications/: subscriptions, the webhook secret (shown once, rotated) and the
delivery log; each user's alone, staff's to read."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import TeamFactory, UserFactory
from tfplatform.accounts.models import User
from tfplatform.notifications.events import EventKind
from tfplatform.notifications.models import Delivery, Subscription
from tfplatform.notifications.services import (
    MAX_SUBSCRIPTIONS,
    delivery_attempt,
    event_publish,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]
SUBSCRIPTIONS = "/api/v1/notifications/subscriptions/"
HOOK = "http://127.0.0.1:9/hook"  # nothing listens: deliveries fail, which is all they need


def client_of(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _subscribe(client: APIClient, **fields: Any) -> dict[str, Any]:
    answer = client.post(SUBSCRIPTIONS, {"events": ["experiment.completed"], **fields},
                         format="json")
    assert answer.status_code == 201, answer.content
    return dict(answer.json())


def test_the_first_webhook_shows_the_secret_once_and_a_rotation_replaces_it() -> None:
    client = client_of(UserFactory(email="a@example.com"))
    assert client.get("/api/v1/notifications/secret/").json() == {"prefix": None,
                                                                   "created_at": None}
    by_email = _subscribe(client, email=True)
    assert by_email["webhook_secret"] is None  # no webhook, no secret
    first = _subscribe(client, webhook_url=HOOK, events=["experiment.failed", "search.ended",
                                                         "experiment.failed"])
    assert first["events"] == ["experiment.failed", "search.ended"]
    secret = first["webhook_secret"]
    assert secret.startswith("whsec_") and len(secret) > 40
    assert _subscribe(client, webhook_url=HOOK)["webhook_secret"] is None  # once only

    shown = client.get("/api/v1/notifications/secret/").json()
    assert secret.startswith(shown["prefix"]) and secret not in str(shown)
    assert all(secret not in str(s) for s in client.get(SUBSCRIPTIONS).json()["results"])

    rotated = client.post("/api/v1/notifications/secret/rotate/")
    assert rotated.status_code == 201
    assert rotated.json()["secret"] != secret
    assert rotated.json()["prefix"] == client.get("/api/v1/notifications/secret/").json()[
        "prefix"]


@pytest.mark.parametrize(("fields", "field"), [
    ({"events": []}, "events"),
    ({"events": ["experiment.exploded"]}, "events"),
    ({"events": "experiment.completed"}, "events"),
    ({"events": ["experiment.completed"] * 10_000}, "events"),
    ({"events": ["experiment.completed"]}, "webhook_url"),  # neither webhook nor email
    ({"events": ["experiment.completed"], "email": True}, "email"),  # no address
    ({"events": ["experiment.completed"], "scope": "team", "webhook_url": HOOK}, "scope"),
    ({"events": ["experiment.completed"], "scope": "everyone", "webhook_url": HOOK}, "scope"),
    ({"events": ["experiment.completed"], "webhook_url": "x" * 2001}, "webhook_url"),
    ({"events": ["experiment.completed"], "webhook_url": "file:///etc/passwd"}, "webhook_url"),
    ({"events": ["experiment.completed"], "webhook_url": "http://10.0.0.5/"}, "webhook_url"),
    ({"events": ["experiment.completed"], "webhook_url": 5}, "webhook_url"),
])
def test_bad_subscriptions_are_field_errors(fields: dict[str, Any], field: str) -> None:
    answer = client_of(UserFactory()).post(SUBSCRIPTIONS, fields, format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()[field] and answer.json()["error"]
    assert not Subscription.objects.exists()


def test_a_user_has_a_bounded_number_of_subscriptions() -> None:
    client = client_of(UserFactory())
    for _ in range(MAX_SUBSCRIPTIONS):
        _subscribe(client, webhook_url=HOOK)
    refused = client.post(SUBSCRIPTIONS, {"events": ["search.ended"], "webhook_url": HOOK},
                          format="json")
    assert refused.status_code == 400 and "remove one" in refused.json()["error"]


def test_a_subscription_is_changed_and_removed_by_its_owner() -> None:
    alice = UserFactory(team=TeamFactory(), email="alice@example.com")
    client = client_of(alice)
    made = _subscribe(client, webhook_url=HOOK)
    path = f"{SUBSCRIPTIONS}{made['id']}/"

    changed = client.patch(path, {"scope": "team", "email": True, "webhook_url": ""},
                           format="json")
    assert changed.status_code == 200, changed.content
    assert (changed.json()["scope"], changed.json()["email"], changed.json()["webhook_url"]) == (
        "team", True, "")
    assert changed.json()["events"] == ["experiment.completed"]  # unchanged
    assert client.patch(path, {"email": False}, format="json").status_code == 400  # no target
    assert client.patch(path, {"webhook_url": "http://[::1]/"},
                        format="json").json()["code"] == "webhook_address_refused"

    assert client.delete(path).status_code == 204
    assert client.get(path).status_code == 404


def test_b_can_neither_see_nor_change_what_a_subscribed_nor_its_deliveries() -> None:
    team = TeamFactory()
    alice, bob = UserFactory(team=team), UserFactory(team=team)  # teammates, even
    alices = _subscribe(client_of(alice), webhook_url=HOOK, scope="team")
    event = event_publish(kind=EventKind.EXPERIMENT_COMPLETED, owner_id=alice.pk,
                          team_id=team.pk, payload={"id": 1, "name": "secret-run"})
    assert event is not None
    delivery = Delivery.objects.get(event=event)
    delivery_attempt(delivery_id=delivery.pk)

    client = client_of(bob)
    path = f"{SUBSCRIPTIONS}{alices['id']}/"
    assert client.get(path).status_code == 404
    assert client.patch(path, {"webhook_url": "http://93.184.216.34/"},
                        format="json").status_code == 404
    assert client.delete(path).status_code == 404
    assert client.get(SUBSCRIPTIONS).json()["count"] == 0
    assert client.get(SUBSCRIPTIONS, {"user": alice.username}).json()["count"] == 0
    listed = client.get("/api/v1/notifications/deliveries/", {"user": alice.username})
    assert listed.status_code == 200 and listed.json()["count"] == 0
    assert "secret-run" not in listed.content.decode()
    assert client.get("/api/v1/notifications/secret/").json()["prefix"] is None  # Bob's: none
    assert Subscription.objects.get(pk=alices["id"]).webhook_url == HOOK

    # Alice sees her log: the delivery, its attempt and why it failed.
    mine = client_of(alice).get("/api/v1/notifications/deliveries/").json()["results"]
    assert [(d["event"], d["recipient"], d["state"], d["attempt_count"]) for d in mine] == [
        ("experiment.completed", alice.username, "pending", 1)]
    [attempt] = mine[0]["attempts"]
    assert attempt["number"] == 1 and attempt["status_code"] is None and attempt["error"]
    assert mine[0]["summary"] == "Experiment secret-run (#1) completed"


def test_staff_read_anyones_subscriptions_and_deliveries_but_do_not_rewrite_them() -> None:
    alice, staff = UserFactory(), UserFactory(is_staff=True)
    alices = _subscribe(client_of(alice), webhook_url=HOOK)
    event_publish(kind=EventKind.EXPERIMENT_COMPLETED, owner_id=alice.pk, team_id=None,
                  payload={"id": 1, "name": "run"})
    client = client_of(staff)
    assert client.get(SUBSCRIPTIONS).json()["count"] == 0  # their own by default
    assert client.get(SUBSCRIPTIONS, {"user": alice.username}).json()["count"] == 1
    path = f"{SUBSCRIPTIONS}{alices['id']}/"
    assert client.get(path).status_code == 200
    assert client.patch(path, {"email": True}, format="json").status_code == 404
    listed = client.get("/api/v1/notifications/deliveries/", {
        "user": alice.username, "state": "pending", "event": "experiment.completed",
        "subscription": alices["id"]})
    assert listed.json()["count"] == 1
    assert client.get("/api/v1/notifications/deliveries/",
                      {"user": alice.username, "state": "delivered"}).json()["count"] == 0
    assert client.delete(path).status_code == 204  # one that misbehaves may go
    # Its delivery stays in Alice's log, and is not attempted again.
    assert Delivery.objects.get().state == "failed"


@pytest.mark.parametrize("query", [{"state": "lost"}, {"event": "x"}, {"subscription": "abc"},
                                   {"state": ""}, {"user": ""}, {"subscription": ""},
                                   {"subscription": "99999999999999999999"},
                                   {"user": "u" * 151}, {"limit": "-1"}])
def test_bad_delivery_filters_are_400s(query: dict[str, str]) -> None:
    answer = client_of(UserFactory()).get("/api/v1/notifications/deliveries/", query)
    assert answer.status_code == 400 and answer.json()["error"]


def test_signed_out_requests_are_refused() -> None:
    client = APIClient()
    for path in (SUBSCRIPTIONS, "/api/v1/notifications/deliveries/",
                 "/api/v1/notifications/secret/"):
        assert client.get(path).status_code == 401
    assert client.post("/api/v1/notifications/secret/rotate/").status_code == 401


def test_the_schema_describes_the_notifications_api() -> None:
    paths = APIClient().get("/api/schema/?format=json").json()["paths"]
    assert {"get", "post"} <= set(paths["/api/v1/notifications/subscriptions/"])
    assert {"get", "patch", "delete"} <= set(
        paths["/api/v1/notifications/subscriptions/{subscription_id}/"])
    for path in ("/api/v1/notifications/secret/", "/api/v1/notifications/secret/rotate/",
                 "/api/v1/notifications/deliveries/"):
        assert path in paths
