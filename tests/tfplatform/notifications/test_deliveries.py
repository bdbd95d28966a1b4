"""Each attempt of a delivery, as the notifier's task runs it, against real receivers: signed
webhooks a receiver verifies, failures logged and retried with growing waits, the checked
address connected to (TLS verified against the URL's name), and email to a real SMTP server."""

import datetime
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.db import connection, transaction

from tests.factories import TeamFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.notifications.conftest import Inbox, Receiver, signature_valid
from tfplatform.accounts.models import User
from tfplatform.notifications.addresses import WebhookTarget
from tfplatform.notifications.events import EventKind
from tfplatform.notifications.models import Delivery, Event, Subscription
from tfplatform.notifications.services import (
    SubscriptionRequest,
    delivery_attempt,
    event_publish,
    subscription_create,
    webhook_secret_rotate,
)
from tfplatform.notifications.transport import webhook_post

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]
COMPLETED = EventKind.EXPERIMENT_COMPLETED


def _publish(owner: User, kind: str = COMPLETED) -> Event | None:
    return event_publish(kind=kind, owner_id=owner.pk, team_id=owner.team_id,
                         payload={"id": 7, "name": "mnist\nrun", "state": "completed"})


def _webhook(owner: User, url: str, events: tuple[str, ...] = (COMPLETED,),
             scope: str = "mine") -> str | None:
    return subscription_create(owner=owner, request=SubscriptionRequest(
        events=list(events), scope=scope, webhook_url=url))[1]


def test_a_receiver_gets_a_payload_signed_with_the_users_secret(
    receivers: Callable[..., Receiver],
) -> None:
    receiver = receivers()
    alice = UserFactory(username="alice")
    secret = _webhook(alice, receiver.url)
    assert secret is not None and secret.startswith("whsec_")
    event = _publish(alice)
    assert event is not None
    delivery = Delivery.objects.get(event=event)

    assert delivery_attempt(delivery_id=delivery.pk) is None
    [got] = receiver.got
    assert signature_valid(secret=secret, received=got)
    assert abs(int(got.headers["X-TFP-Timestamp"]) - time.time()) < 60
    assert got.headers["X-TFP-Event"] == "experiment.completed"
    assert got.headers["X-TFP-Delivery"] == str(delivery.pk)
    assert got.headers["Host"] == receiver.url.split("/")[2]
    body = json.loads(got.body)
    assert body["event"] == "experiment.completed" and body["owner"] == "alice"
    assert body["data"] == {"id": 7, "name": "mnist\nrun", "state": "completed"}
    assert body["summary"] == "Experiment mnist run (#7) completed"  # one line
    delivery.refresh_from_db()
    assert delivery.state == "delivered" and delivery.attempt_count == 1
    assert list(delivery.attempts.values_list("number", "status_code", "error")) == [(1, 200, "")]

    # A body changed in transit, or a rotated secret, no longer verifies.
    tampered = type(got)(path=got.path, headers=got.headers, body=got.body.replace(b"7", b"8"))
    assert not signature_valid(secret=secret, received=tampered)
    rotated = webhook_secret_rotate(user=alice)
    assert delivery_attempt(delivery_id=Delivery.objects.get(event=_publish(alice)).pk) is None
    assert signature_valid(secret=rotated, received=receiver.got[1])
    assert not signature_valid(secret=secret, received=receiver.got[1])


def test_a_failing_receiver_is_tried_again_later_each_time_then_given_up(
    receivers: Callable[..., Receiver],
) -> None:
    receiver = receivers(statuses=[500, 503, 404])
    alice = UserFactory()
    _webhook(alice, receiver.url)
    delivery = Delivery.objects.get(event=_publish(alice))

    assert delivery_attempt(delivery_id=delivery.pk) == pytest.approx(0.1)
    # A copy of the message before its time attempts nothing: it says how long to wait.
    early = delivery_attempt(delivery_id=delivery.pk)
    assert early is not None and 0 <= early <= 0.1 and len(receiver.got) == 1
    time.sleep(0.15)
    assert delivery_attempt(delivery_id=delivery.pk) == pytest.approx(0.2)  # doubled
    time.sleep(0.25)
    assert delivery_attempt(delivery_id=delivery.pk) is None  # the third of 3: given up

    delivery.refresh_from_db()
    assert delivery.state == "failed" and delivery.attempt_count == len(receiver.got) == 3
    assert [(a.number, a.status_code, a.error) for a in delivery.attempts.all()] == [
        (1, 500, "The receiver answered HTTP 500."), (2, 503, "The receiver answered HTTP 503."),
        (3, 404, "The receiver answered HTTP 404.")]
    assert delivery_attempt(delivery_id=delivery.pk) is None and len(receiver.got) == 3


def test_a_redirect_is_not_followed(receivers: Callable[..., Receiver]) -> None:
    receiver = receivers(statuses=[307])
    alice = UserFactory()
    _webhook(alice, receiver.url)
    delivery = Delivery.objects.get(event=_publish(alice))
    delivery_attempt(delivery_id=delivery.pk)
    attempt = delivery.attempts.get()
    assert attempt.status_code == 307 and "redirects are not followed" in attempt.error
    assert len(receiver.got) == 1


def test_an_address_refused_since_the_subscription_is_refused_at_delivery(
    receivers: Callable[..., Receiver], platform_settings_override: PlatformSettingsOverride,
) -> None:
    """The host is resolved and judged again at every attempt: a name that resolves to a
    private address by then (or a range staff no longer allow) gets nothing."""
    receiver = receivers()
    alice = UserFactory()
    _webhook(alice, receiver.url)
    platform_settings_override(webhook_allowed_networks=())
    delivery = Delivery.objects.get(event=_publish(alice))
    assert delivery_attempt(delivery_id=delivery.pk) is not None  # tried again later
    assert receiver.got == []
    assert "a loopback address" in delivery.attempts.get().error


def test_the_checked_address_is_connected_to_whatever_the_name_resolves_to_now(
    receivers: Callable[..., Receiver],
) -> None:
    """No second lookup between the check and the connection (DNS rebinding): the name is
    only the Host header; this one resolves nowhere at all."""
    receiver = receivers()
    port = int(receiver.url.split(":")[2].split("/")[0])
    target = WebhookTarget(url=f"http://rebound.invalid:{port}/hook", scheme="http",
                           host="rebound.invalid", port=port, address="127.0.0.1")
    assert webhook_post(target=target, body=b"{}", headers={}) == 200
    assert receiver.got[0].headers["Host"] == f"rebound.invalid:{port}"


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, Path]:
    """A CA of the test's own and a certificate it signed for hooks.test (no IP address)."""
    now = datetime.datetime.now(datetime.UTC)

    def issue(*, subject: str, key: Any, issuer: Any, issuer_key: Any, ca: bool) -> Any:
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(issuer).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = issue(subject="test CA", key=ca_key, issuer=ca_name, issuer_key=ca_key, ca=True)
    cert = issue(subject="hooks.test", key=key, issuer=ca_name, issuer_key=ca_key, ca=False)
    files = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "cert.pem", "key": tmp_path / "key.pem"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return files


def test_tls_is_verified_against_the_urls_name_not_the_address(
    receivers: Callable[..., Receiver], tls_files: dict[str, Path],
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(webhook_ca_bundle=str(tls_files["ca"]))
    receiver = receivers(tls=(tls_files["cert"], tls_files["key"]))
    port = int(receiver.url.split(":")[2].split("/")[0])

    def target(name: str) -> WebhookTarget:
        return WebhookTarget(url=f"https://{name}:{port}/hook", scheme="https", host=name,
                             port=port, address="127.0.0.1")

    assert webhook_post(target=target("hooks.test"), body=b"{}", headers={}) == 200
    assert receiver.got[0].headers["Host"] == f"hooks.test:{port}"

    # The same server by its address, or by another name: its certificate names neither.
    alice = UserFactory()
    _webhook(alice, f"https://127.0.0.1:{port}/hook")
    delivery = Delivery.objects.get(event=_publish(alice))
    delivery_attempt(delivery_id=delivery.pk)
    assert delivery.attempts.get().error.startswith("TLS error")
    with pytest.raises(OSError, match="certificate"):
        webhook_post(target=target("other.test"), body=b"{}", headers={})
    assert len(receiver.got) == 1


def test_a_receiver_that_never_answers_costs_its_read_timeout(
    silent_receiver: socket.socket, platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(webhook_read_timeout_seconds=0.3)
    alice = UserFactory()
    _webhook(alice, f"http://127.0.0.1:{silent_receiver.getsockname()[1]}/hook")
    delivery = Delivery.objects.get(event=_publish(alice))
    started = time.monotonic()
    assert delivery_attempt(delivery_id=delivery.pk) is not None
    assert time.monotonic() - started < 2
    attempt = delivery.attempts.get()
    assert attempt.status_code is None and attempt.error == "No answer within 0.3 s."


def test_email_reaches_a_real_smtp_server(smtp_inbox: Inbox) -> None:
    alice = UserFactory(email="alice@example.com")
    subscription_create(owner=alice, request=SubscriptionRequest(
        events=[EventKind.EXPERIMENT_FAILED], email=True))
    event = event_publish(kind=EventKind.EXPERIMENT_FAILED, owner_id=alice.pk, team_id=None,
                          payload={"id": 3, "name": "resnet", "error": "OOM at step 9000"})
    assert event is not None
    delivery = Delivery.objects.get(event=event)
    assert (delivery.channel, delivery.target) == ("email", "alice@example.com")

    assert delivery_attempt(delivery_id=delivery.pk) is None
    [message] = smtp_inbox.messages
    assert message.rcpt_tos == ["alice@example.com"]
    text = message.content.decode()
    assert "Subject: [TF Platform] Experiment resnet (#3) failed" in text
    assert "OOM at step 9000" in text
    delivery.refresh_from_db()
    assert delivery.state == "delivered"


def test_an_email_without_an_address_fails_at_once(smtp_inbox: Inbox) -> None:
    alice = UserFactory(email="alice@example.com")
    subscription_create(owner=alice, request=SubscriptionRequest(events=[COMPLETED], email=True))
    User.objects.filter(pk=alice.pk).update(email="")
    delivery = Delivery.objects.get(event=_publish(alice))
    assert delivery_attempt(delivery_id=delivery.pk) is None  # nothing to try again
    delivery.refresh_from_db()
    assert delivery.state == "failed" and "no email address" in delivery.attempts.get().error
    assert smtp_inbox.messages == []


def test_an_event_reaches_its_owner_and_the_team_members_who_asked_for_the_team() -> None:
    team, other_team = TeamFactory(), TeamFactory()
    alice, bob, carol = (UserFactory(team=team) for _ in range(3))
    dave, erin = UserFactory(team=other_team), UserFactory(team=team, is_active=False)
    for user, scope in ((alice, "mine"), (bob, "team"), (carol, "mine"), (dave, "team"),
                        (erin, "team")):
        _webhook(user, "http://127.0.0.1:9/hook", scope=scope)
    _webhook(carol, "http://127.0.0.1:9/other", events=(EventKind.SEARCH_ENDED,), scope="team")

    event = _publish(alice)
    assert event is not None
    assert set(Delivery.objects.filter(event=event).values_list("recipient", flat=True)) == {
        alice.pk, bob.pk}
    # Bob left the team: its objects are no longer his to hear of.
    User.objects.filter(pk=bob.pk).update(team=other_team)
    assert set(Delivery.objects.filter(event=_publish(alice)).values_list(
        "recipient", flat=True)) == {alice.pk}
    # No one subscribed to what happened: nothing is recorded.
    assert _publish(alice, kind=EventKind.WORKSPACE_CULLED) is None


def test_a_rolled_back_publisher_leaves_nothing() -> None:
    alice = UserFactory()
    _webhook(alice, "http://127.0.0.1:9/hook")
    with pytest.raises(RuntimeError), transaction.atomic():
        _publish(alice)
        raise RuntimeError("the experiment's transition failed")
    assert not Event.objects.exists() and not Delivery.objects.exists()
    assert Subscription.objects.count() == 1


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite stores a NUL in JSON")
def test_an_event_that_cannot_be_recorded_leaves_the_publishers_change_standing() -> None:
    alice = UserFactory()
    _webhook(alice, "http://127.0.0.1:9/hook")
    with transaction.atomic():  # the publisher's, e.g. an experiment's transition
        assert event_publish(kind=COMPLETED, owner_id=alice.pk, team_id=None,
                             payload={"id": 1, "name": "nul\x00name"}) is None
        User.objects.filter(pk=alice.pk).update(first_name="still")
    assert User.objects.get(pk=alice.pk).first_name == "still"
    assert not Event.objects.exists() and not Delivery.objects.exists()
