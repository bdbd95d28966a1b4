"""The notifier for real: a Celery worker on the notifications queue (threads, as `manage.py
notifier` runs it) takes the deliveries an event's commit sent, retries with backoff, and a
receiver that never answers holds its own delivery only."""

import socket
import time
from collections.abc import Callable, Iterator

import pytest
from django.db import transaction

from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.notifications.conftest import Receiver, signature_valid
from tfplatform.notifications.dispatch import NOTIFICATIONS_QUEUE
from tfplatform.notifications.events import EventKind
from tfplatform.notifications.models import Delivery
from tfplatform.notifications.services import (
    SubscriptionRequest,
    event_publish,
    subscription_create,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]


@pytest.fixture
def notifier() -> Iterator[None]:
    """A real Celery worker in threads of this process (it sees this test's settings)."""
    from celery.contrib.testing.worker import start_worker

    from tfplatform.config.celery import app
    from tfplatform.notifications import tasks  # noqa: F401 - registers the task

    with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False,
                      queues=[NOTIFICATIONS_QUEUE], shutdown_timeout=30):
        yield


def _settled(delivery: Delivery, *, within: float) -> Delivery:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        delivery.refresh_from_db()
        if delivery.state != Delivery.State.PENDING:
            return delivery
        time.sleep(0.05)
    raise AssertionError(f"delivery {delivery.pk} still pending after {within} s")


def test_retried_until_accepted_while_a_silent_receiver_holds_only_its_own(
    notifier: None, receivers: Callable[..., Receiver], silent_receiver: socket.socket,
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    # Long enough that the silent receiver's first attempt outlasts everything else here.
    platform_settings_override(webhook_read_timeout_seconds=30.0)
    flaky = receivers(statuses=[500, 500])
    alice = UserFactory()
    silent_url = f"http://127.0.0.1:{silent_receiver.getsockname()[1]}/hook"
    secret, again = (subscription_create(owner=alice, request=SubscriptionRequest(
        events=[EventKind.SEARCH_ENDED], webhook_url=url))[1] for url in (silent_url, flaky.url))
    assert secret is not None and again is None  # one secret signs all of Alice's webhooks
    started = time.monotonic()
    with transaction.atomic():  # sent once this commits
        event = event_publish(kind=EventKind.SEARCH_ENDED, owner_id=alice.pk, team_id=None,
                              payload={"id": 4, "name": "lr sweep", "state": "completed"})
    assert event is not None
    silent = Delivery.objects.get(event=event, target=silent_url)
    accepted = Delivery.objects.get(event=event, target=flaky.url)

    assert _settled(accepted, within=15).state == Delivery.State.DELIVERED
    assert time.monotonic() - started < 15
    assert [(a.number, a.status_code) for a in accepted.attempts.all()] == [
        (1, 500), (2, 500), (3, 200)]
    assert len(flaky.got) == 3  # one accepted delivery, no duplicate
    assert all(signature_valid(secret=secret, received=got) for got in flaky.got)
    # Meanwhile the silent receiver's first attempt has not ended.
    silent.refresh_from_db()
    assert (silent.state, silent.attempt_count, silent.attempts.count()) == ("pending", 1, 0)

    silent_receiver.close()  # its connection is reset; later attempts are refused
    assert _settled(silent, within=20).state == Delivery.State.FAILED
    assert silent.attempts.count() == 3 and all(a.error for a in silent.attempts.all())
