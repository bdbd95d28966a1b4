"""Every write of notifications: subscriptions, each user's webhook secret, the events other
apps publish (recorded with a delivery per target, sent once the publisher's transaction
commits), and each attempt of a delivery.

Nothing here delivers in the publisher's path: a delivery is a Celery task of the notifier
(`manage.py notifier`), one thread each, so a receiver that never answers holds its own
delivery and nothing else.
"""

import json
import logging
import secrets
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import requests
from django.conf import settings
from django.core.mail import send_mail
from django.db import DatabaseError, transaction
from django.db.models import F, Q
from django.utils import timezone

from tfplatform.accounts.models import User
from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import Actor, audit_record, audit_snapshot
from tfplatform.core.errors import InvalidInput
from tfplatform.notifications.addresses import webhook_target_resolve
from tfplatform.notifications.dispatch import deliveries_send_on_commit
from tfplatform.notifications.events import EventKind, event_summary
from tfplatform.notifications.models import (
    Delivery,
    DeliveryAttempt,
    Event,
    Subscription,
    WebhookSecret,
)
from tfplatform.notifications.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SHOWN_CHARS,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    signature_compute,
    webhook_secret_derive,
)
from tfplatform.notifications.transport import webhook_post

logger = logging.getLogger(__name__)
MAX_SUBSCRIPTIONS = 20
# A payload's strings are cut to this (an experiment's error may be a long traceback).
PAYLOAD_TEXT_LENGTH = 2000
ERROR_LENGTH = 500
# A delivery not attempted this long after it was due lost its message (the broker was away,
# or the notifier stopped holding its retry): the notifier sends it again.
OVERDUE_SECONDS = 120.0
# Past the request's own timeouts, before another copy of its message may attempt it.
LEASE_MARGIN_SECONDS = 30.0

Channel = Delivery.Channel
State = Delivery.State


@dataclass(frozen=True, kw_only=True)
class SubscriptionRequest:
    events: list[str]
    scope: str = Subscription.Scope.MINE
    webhook_url: str = ""
    email: bool = False


def subscription_create(*, owner: User,
                        request: SubscriptionRequest) -> tuple[Subscription, str | None]:
    """The new subscription, and the owner's webhook secret when this made it (their first
    webhook): shown this once."""
    events = _request_check(owner=owner, request=request)
    with transaction.atomic():
        # Locked: two creations at once cannot both pass the limit.
        User.objects.select_for_update().filter(pk=owner.pk).first()
        if Subscription.objects.filter(owner=owner).count() >= MAX_SUBSCRIPTIONS:
            raise InvalidInput(f"You have {MAX_SUBSCRIPTIONS} subscriptions, the most one may "
                               "have: remove one first.")
        subscription = Subscription.objects.create(
            owner=owner, events=events, scope=request.scope, webhook_url=request.webhook_url,
            email=request.email)
        secret = _secret_ensure(user=owner) if request.webhook_url else None
    return subscription, secret


def subscription_update(*, subscription: Subscription,
                        changes: dict[str, Any]) -> tuple[Subscription, str | None]:
    """`changes`: any of SubscriptionRequest's fields; the result is checked as a new one is."""
    current = SubscriptionRequest(events=subscription.events, scope=subscription.scope,
                                  webhook_url=subscription.webhook_url, email=subscription.email)
    request = replace(current, **changes)
    events = _request_check(owner=subscription.owner, request=request)
    with transaction.atomic():
        Subscription.objects.filter(pk=subscription.pk).update(
            events=events, scope=request.scope, webhook_url=request.webhook_url,
            email=request.email, updated_at=timezone.now())
        secret = _secret_ensure(user=subscription.owner) if request.webhook_url else None
    subscription.refresh_from_db()
    return subscription, secret


SUBSCRIPTION_AUDIT_FIELDS = ("owner", "events", "scope", "webhook_url", "email")


def subscription_delete(*, subscription: Subscription, actor: Actor = None) -> None:
    """Its deliveries stay in the log; those still pending are not attempted again. Removed by
    someone other than its owner (staff), it is an audit row: `actor` is who."""
    with transaction.atomic():
        # Locked: removed twice at once, only one removal happened, and only it is recorded.
        if not Subscription.objects.select_for_update().filter(pk=subscription.pk).exists():
            return
        if actor is not None and actor.is_authenticated and actor.pk != subscription.owner_id:
            audit_record(actor=actor, action=AuditAction.SUBSCRIPTION_DELETE, target=subscription,
                         before=audit_snapshot(obj=subscription,
                                               fields=SUBSCRIPTION_AUDIT_FIELDS),
                         after=None)
        Delivery.objects.filter(subscription=subscription, state=State.PENDING).update(
            state=State.FAILED, finished_at=timezone.now(), next_attempt_at=None)
        subscription.delete()


def _request_check(*, owner: User, request: SubscriptionRequest) -> list[str]:
    """The events, each once, in the order given."""
    events = list(dict.fromkeys(request.events))
    if not events:
        raise InvalidInput("Subscribe to at least one event.", field="events")
    unknown = [e for e in events if e not in EventKind.values]
    if unknown:
        raise InvalidInput(f"Unknown event {unknown[0]!r}; events are: "
                           f"{', '.join(EventKind.values)}.", field="events")
    if request.scope not in Subscription.Scope.values:
        raise InvalidInput("scope is mine or team.", field="scope")
    if request.scope == Subscription.Scope.TEAM and owner.team_id is None:
        raise InvalidInput("You are in no team: the scope can only be `mine`.", field="scope")
    if not request.webhook_url and not request.email:
        raise InvalidInput("Give a webhook_url, ask for email, or both.", field="webhook_url")
    if request.email and not owner.email:
        raise InvalidInput("Your account has no email address to send to.", field="email")
    if request.webhook_url:
        webhook_target_resolve(url=request.webhook_url)
    return events


def webhook_secret_rotate(*, user: User) -> str:
    """A new secret, shown this once; the old one stops signing at once."""
    salt = secrets.token_urlsafe(32)
    secret = webhook_secret_derive(salt=salt)
    WebhookSecret.objects.update_or_create(user=user, defaults={
        "salt": salt, "prefix": secret[:SHOWN_CHARS], "created_at": timezone.now()})
    return secret


def _secret_ensure(*, user: User) -> str | None:
    if WebhookSecret.objects.filter(user=user).exists():
        return None
    return webhook_secret_rotate(user=user)


def event_publish(*, kind: str, owner_id: int, team_id: int | None,
                  payload: dict[str, Any]) -> Event | None:
    """Records that `kind` happened to an object of `owner_id` (and `team_id`), with a
    delivery to each target of each subscription to it: the owner's own, and those of its
    team's members that asked for their team's. The deliveries are sent once the caller's
    transaction commits (at once outside one), and never attempted here. Nothing is recorded
    when no one subscribed. `payload`: plain JSON values (the object's id and name, ...)."""
    if kind not in EventKind.values:
        raise ValueError(f"Unknown event kind {kind!r}")
    subscriptions = [s for s in _subscriptions_of(owner_id=owner_id, team_id=team_id)
                     if kind in s.events]
    if not subscriptions:
        return None
    bounded = {key: value[:PAYLOAD_TEXT_LENGTH] if isinstance(value, str) else value
               for key, value in payload.items()}
    now = timezone.now()
    try:
        # A savepoint: what the publisher did (an experiment's end) stands even if this fails.
        with transaction.atomic():
            event = Event.objects.create(kind=kind, owner_id=owner_id, team_id=team_id,
                                         payload=bounded)
            deliveries = [
                Delivery(event=event, subscription=s, recipient_id=s.owner_id,
                         channel=channel, target=target, next_attempt_at=now)
                for s in subscriptions
                for channel, target in ((Channel.WEBHOOK, s.webhook_url),
                                        (Channel.EMAIL, s.owner.email))
                if (s.webhook_url if channel == Channel.WEBHOOK else s.email)
            ]
            created = Delivery.objects.bulk_create(deliveries)
            deliveries_send_on_commit(delivery_ids=[d.pk for d in created])
    except DatabaseError:
        logger.exception("Event %s of user #%s could not be recorded", kind, owner_id)
        return None
    return event


def _subscriptions_of(*, owner_id: int, team_id: int | None) -> list[Subscription]:
    """A team member's team subscription follows the team they are in now: one who left it
    hears of its objects no more."""
    reaching = Q(owner_id=owner_id)
    if team_id is not None:
        reaching |= Q(scope=Subscription.Scope.TEAM, owner__team_id=team_id)
    return list(Subscription.objects.filter(reaching, owner__is_active=True)
                .select_related("owner"))


@dataclass(frozen=True, kw_only=True)
class _Outcome:
    delivered: bool
    status_code: int | None = None
    error: str = ""
    # Nothing another attempt could change (no address to send to).
    final: bool = False


def delivery_attempt(*, delivery_id: int) -> float | None:
    """One attempt of a pending delivery that is due, logged. Returns the seconds to wait
    before the next attempt (this one failed, attempts remain), else None: delivered, failed
    for good, or not this copy's to attempt (another holds it, or it is done)."""
    now = timezone.now()
    lease = (settings.PLATFORM.webhook_connect_timeout_seconds
             + settings.PLATFORM.webhook_read_timeout_seconds + settings.EMAIL_TIMEOUT
             + LEASE_MARGIN_SECONDS)
    free = Q(lease_until__isnull=True) | Q(lease_until__lt=now)
    claimed = Delivery.objects.filter(free, pk=delivery_id, state=State.PENDING,
                                      next_attempt_at__lte=now).update(
        lease_until=now + timedelta(seconds=lease), attempt_count=F("attempt_count") + 1)
    if not claimed:
        early = Delivery.objects.filter(free, pk=delivery_id, state=State.PENDING,
                                        next_attempt_at__gt=now).first()
        # A copy sent before its time (the notifier's resend) waits for it.
        return _seconds_until(early.next_attempt_at, now=now) if early is not None else None
    delivery = Delivery.objects.select_related("event__owner", "subscription").get(
        pk=delivery_id)
    started, at = time.monotonic(), timezone.now()
    outcome = _send(delivery=delivery)
    DeliveryAttempt.objects.create(
        delivery=delivery, number=delivery.attempt_count, at=at,
        status_code=outcome.status_code, error=outcome.error[:ERROR_LENGTH],
        duration_ms=int((time.monotonic() - started) * 1000))
    done = timezone.now()
    if outcome.delivered or outcome.final or (
            delivery.attempt_count >= settings.PLATFORM.notification_attempts):
        Delivery.objects.filter(pk=delivery.pk).update(
            state=State.DELIVERED if outcome.delivered else State.FAILED, finished_at=done,
            next_attempt_at=None, lease_until=None)
        return None
    wait = min(settings.PLATFORM.notification_retry_seconds * 2 ** (delivery.attempt_count - 1),
               settings.PLATFORM.notification_retry_max_seconds)
    # Still pending only if the subscription was not removed meanwhile.
    Delivery.objects.filter(pk=delivery.pk, state=State.PENDING).update(
        next_attempt_at=done + timedelta(seconds=wait), lease_until=None)
    return wait


def _seconds_until(moment: datetime | None, *, now: datetime) -> float | None:
    return None if moment is None else max((moment - now).total_seconds(), 0.0)


def _send(*, delivery: Delivery) -> _Outcome:
    if delivery.channel == Channel.EMAIL:
        return _email_send(delivery=delivery)
    return _webhook_send(delivery=delivery)


def _webhook_send(*, delivery: Delivery) -> _Outcome:
    salt = WebhookSecret.objects.filter(user_id=delivery.recipient_id).values_list(
        "salt", flat=True).first()
    if salt is None:
        return _Outcome(delivered=False, final=True, error=(
            "You have no webhook secret to sign with: make one "
            "(POST /api/v1/notifications/secret/rotate/)."))
    try:
        target = webhook_target_resolve(url=delivery.target)
    except InvalidInput as refused:
        return _Outcome(delivered=False, error=refused.message)
    body = json.dumps(_webhook_body(delivery=delivery), separators=(",", ":")).encode()
    timestamp = int(time.time())
    headers = {
        EVENT_HEADER: delivery.event.kind, DELIVERY_HEADER: str(delivery.pk),
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature_compute(secret=webhook_secret_derive(salt=salt),
                                            timestamp=timestamp, body=body),
    }
    try:
        status = webhook_post(target=target, body=body, headers=headers)
    except requests.RequestException as error:
        return _Outcome(delivered=False, error=_request_error(error))
    if 200 <= status < 300:
        return _Outcome(delivered=True, status_code=status)
    hint = " (redirects are not followed)" if 300 <= status < 400 else ""
    return _Outcome(delivered=False, status_code=status,
                    error=f"The receiver answered HTTP {status}{hint}.")


def _webhook_body(*, delivery: Delivery) -> dict[str, Any]:
    event = delivery.event
    return {
        "event": event.kind, "event_id": event.pk, "delivery_id": delivery.pk,
        "created_at": event.created_at.isoformat(), "owner": event.owner.username,
        "summary": event_summary(kind=event.kind, payload=event.payload),
        "data": event.payload,
    }


def _request_error(error: requests.RequestException) -> str:
    if isinstance(error, requests.ConnectTimeout):
        return (f"No connection within {settings.PLATFORM.webhook_connect_timeout_seconds:g} "
                "s.")
    if isinstance(error, requests.ReadTimeout):
        return f"No answer within {settings.PLATFORM.webhook_read_timeout_seconds:g} s."
    kind = "TLS error" if isinstance(error, requests.exceptions.SSLError) else "Failed"
    return f"{kind}: {_cause(error)}"


def _cause(error: BaseException) -> str:
    """The innermost reason under requests' and urllib3's wrappers."""
    seen: set[int] = set()
    current: BaseException | None = error
    deepest = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        deepest = current
        linked = [getattr(current, "reason", None), current.__cause__, current.__context__,
                  *current.args]
        current = next((e for e in linked if isinstance(e, BaseException)), None)
    if isinstance(deepest, OSError) and deepest.strerror:
        return str(deepest.strerror)
    return str(deepest)


def _email_send(*, delivery: Delivery) -> _Outcome:
    if not delivery.target:
        return _Outcome(delivered=False, final=True,
                        error="Your account has no email address to send to.")
    event = delivery.event
    summary = event_summary(kind=event.kind, payload=event.payload)
    lines = [summary, "", *(f"{key}: {value}" for key, value in event.payload.items()), "",
             f"Event {event.kind} #{event.pk} of {event.owner.username}'s, "
             f"{event.created_at:%Y-%m-%d %H:%M:%S} UTC.",
             f"You get this by your notification subscription #{delivery.subscription_id}; "
             "your account's Notifications page lists and removes them."]
    try:
        send_mail(subject=f"[TF Platform] {summary}", message="\n".join(lines),
                  from_email=None, recipient_list=[delivery.target])
    except (OSError, ValueError) as error:  # smtplib's errors are OSErrors
        return _Outcome(delivered=False, error=f"Failed: {error}")
    return _Outcome(delivered=True)


def deliveries_resend_overdue(*, now: datetime | None = None) -> list[int]:
    """Deliveries still pending well past their time (their message was lost): the notifier's
    loop sends them again. An attempt holds its delivery, so a copy never doubles one."""
    now = now or timezone.now()
    overdue = list(Delivery.objects.filter(
        Q(lease_until__isnull=True) | Q(lease_until__lt=now), state=State.PENDING,
        next_attempt_at__lt=now - timedelta(seconds=OVERDUE_SECONDS),
    ).order_by("next_attempt_at").values_list("pk", flat=True)[:1000])
    deliveries_send_on_commit(delivery_ids=overdue)
    return overdue


def events_prune(*, now: datetime | None = None) -> int:
    """Events older than PLATFORM_NOTIFICATION_LOG_DAYS go, with their deliveries."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.PLATFORM.notification_log_days)
    deleted, _ = Event.objects.filter(created_at__lt=cutoff).exclude(
        deliveries__state=State.PENDING).delete()
    return deleted
