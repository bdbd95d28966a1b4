"""The account's Notifications page: subscribe (the secret shown once), rotate, remove, and the
delivery log; each user's alone."""

import pytest
from django.test import Client

from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.accounts.models import User
from tfplatform.notifications.models import Delivery, Subscription
from tfplatform.notifications.services import delivery_attempt, event_publish

pytestmark = pytest.mark.django_db
PAGE = "/account/notifications/"


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_subscribe_see_the_log_rotate_and_remove(
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(webhook_allowed_networks=("127.0.0.1/32",))
    alice = UserFactory(email="alice@example.com")
    client = signed_in(alice)
    page = client.get(PAGE)
    assert page.status_code == 200 and "No subscriptions." in page.content.decode()

    made = client.post(PAGE, {"events": ["experiment.failed", "deploy.failed"], "scope": "mine",
                              "webhook_url": "http://127.0.0.1:9/hook"})
    text = made.content.decode()
    assert made.status_code == 200 and 'id="issued-secret"' in text  # shown once, here
    assert "no-cache" in made["Cache-Control"]
    subscription = Subscription.objects.get(owner=alice)
    assert subscription.events == ["experiment.failed", "deploy.failed"]
    assert 'id="issued-secret"' not in client.get(PAGE).content.decode()

    refused = client.post(PAGE, {"events": ["search.ended"], "scope": "mine",
                                 "webhook_url": "http://10.0.0.8/hook"})
    assert refused.status_code == 200 and "a private address" in refused.content.decode()
    assert Subscription.objects.count() == 1

    event_publish(kind="experiment.failed", owner_id=alice.pk, team_id=None,
                  payload={"id": 2, "name": "run"})
    delivery_attempt(delivery_id=Delivery.objects.get().pk)  # nothing listens on port 9
    log = client.get(PAGE).content.decode()
    assert "experiment.failed #" in log and "Failed:" in log

    rotated = client.post("/account/notifications/secret/rotate/")
    assert 'id="issued-secret"' in rotated.content.decode()

    bob = signed_in(UserFactory())
    assert bob.post(f"/account/notifications/{subscription.pk}/delete/").status_code == 404
    assert "experiment.failed #" not in bob.get(PAGE).content.decode()
    assert client.post(f"/account/notifications/{subscription.pk}/delete/").status_code == 302
    assert not Subscription.objects.exists()


def test_the_page_needs_a_sign_in() -> None:
    assert Client().get(PAGE).status_code == 302


def test_staff_see_subscriptions_and_deliveries_in_the_admin() -> None:
    alice = UserFactory()
    Subscription.objects.create(owner=alice, events=["search.ended"],
                                webhook_url="https://hooks.example.com/a")
    event_publish(kind="search.ended", owner_id=alice.pk, team_id=None,
                  payload={"id": 1, "name": "sweep", "state": "completed"})
    staff = signed_in(UserFactory(is_staff=True, is_superuser=True))
    for path in ("/admin/notifications/subscription/", "/admin/notifications/delivery/"):
        page = staff.get(path)
        assert page.status_code == 200 and "https://hooks.example.com/a" in page.content.decode()
    assert signed_in(alice).get("/admin/notifications/subscription/").status_code == 302
