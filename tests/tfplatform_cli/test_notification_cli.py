"""`tfp notifications` against a live server: subscribe (the secret printed once), list, read
the delivery log, rotate the secret, remove; another user's subscription is "not found"."""

from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform_cli.conftest import Tfp
from tests.tfplatform_cli.test_search_cli import signed_in
from tfplatform.accounts.models import User
from tfplatform.notifications.models import Delivery, Subscription
from tfplatform.notifications.services import delivery_attempt, event_publish

pytestmark = pytest.mark.django_db(transaction=True)


def test_notifications_from_the_command_line(
    live_server: Any, tfp: Callable[[str], Tfp],
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(webhook_allowed_networks=("127.0.0.1/32",))
    alice = signed_in(tfp, live_server.url, "alice")
    added = alice("notifications", "add", "--event", "experiment.failed", "--event",
                  "search.ended", "--webhook", "http://127.0.0.1:9/hook")
    assert added.returncode == 0, added.stderr
    subscription = Subscription.objects.get()
    assert f"subscription {subscription.pk}: experiment.failed, search.ended" in added.stdout
    assert "webhook secret (shown once" in added.stdout and "whsec_" in added.stdout

    listed = alice("notifications", "list")
    assert listed.returncode == 0 and "http://127.0.0.1:9/hook" in listed.stdout
    assert "whsec_" not in listed.stdout

    refused = alice("notifications", "add", "--event", "deploy.failed", "--webhook",
                    "http://169.254.169.254/latest/")
    assert refused.returncode == 1 and "link-local" in refused.stderr
    assert alice("notifications", "add", "--event", "deploy.failed").returncode == 2
    assert Subscription.objects.count() == 1

    assert "No deliveries." in alice("notifications", "deliveries").stdout
    owner = User.objects.get(username="alice")
    event_publish(kind="experiment.failed", owner_id=owner.pk, team_id=None,
                  payload={"id": 5, "name": "run"})
    delivery_attempt(delivery_id=Delivery.objects.get().pk)  # nothing listens on port 9
    log = alice("notifications", "deliveries", "--state", "pending")
    assert log.returncode == 0, log.stderr
    row = log.stdout.splitlines()[1]
    assert "experiment.failed" in row and "webhook:http://127.0.0.1:9/hook" in row
    assert "Failed" in row

    rotated = alice("notifications", "rotate-secret")
    assert rotated.returncode == 0 and "whsec_" in rotated.stdout

    bob = signed_in(tfp, live_server.url, "bob")
    gone = bob("notifications", "remove", str(subscription.pk))
    assert gone.returncode == 1 and f"subscription {subscription.pk} not found" in gone.stderr
    assert "No subscriptions." in bob("notifications", "list").stdout
    assert alice("notifications", "remove", str(subscription.pk)).returncode == 0
    assert not Subscription.objects.exists()
