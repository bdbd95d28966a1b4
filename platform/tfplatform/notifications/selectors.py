"""Reads of notifications. Subscriptions and deliveries are their owner's alone (and staff's):
not the team's, unlike experiments, since a webhook URL may carry the receiver's own token."""

from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.db.models import Prefetch, QuerySet

from tfplatform.accounts.models import User
from tfplatform.core.errors import NotFound
from tfplatform.notifications.models import Delivery, DeliveryAttempt, Subscription, WebhookSecret


def subscription_list(*, user: User | AnonymousUser,
                      of_username: str | None = None) -> QuerySet[Subscription]:
    """The user's own; staff may name another user's (`of_username`), anyone else finds none
    of another's."""
    if not user.is_authenticated:
        return Subscription.objects.none()
    found = Subscription.objects.select_related("owner")
    if of_username and user.is_staff:
        return found.filter(owner__username=of_username)
    found = found.filter(owner=user)
    return found.filter(owner__username=of_username) if of_username else found


def subscription_get(*, user: User | AnonymousUser, subscription_id: int) -> Subscription:
    found = Subscription.objects.select_related("owner").filter(pk=subscription_id).first()
    if found is None or not (user.is_authenticated and (user.is_staff
                                                        or found.owner_id == user.pk)):
        raise NotFound("Subscription not found.")
    return found


def delivery_list(*, user: User | AnonymousUser, of_username: str | None = None,
                  filters: dict[str, Any] | None = None) -> QuerySet[Delivery]:
    """Newest first, each with its attempts in order. `filters`: any of state, channel,
    event (its kind) and subscription (its id)."""
    if not user.is_authenticated:
        return Delivery.objects.none()
    found = Delivery.objects.select_related("event", "recipient").prefetch_related(
        Prefetch("attempts", queryset=DeliveryAttempt.objects.order_by("number")))
    lookups = {"state": "state", "channel": "channel", "event": "event__kind",
               "subscription": "subscription_id"}
    found = found.filter(**{lookups[name]: value for name, value in (filters or {}).items()})
    if of_username and user.is_staff:
        return found.filter(recipient__username=of_username)
    found = found.filter(recipient=user)
    return found.filter(recipient__username=of_username) if of_username else found


def attempt_log(*, user: User, limit: int = 100) -> list[DeliveryAttempt]:
    """The user's latest attempts, newest first (the account page's log)."""
    return list(DeliveryAttempt.objects.filter(delivery__recipient=user)
                .select_related("delivery__event").order_by("-at", "-id")[:limit])


def webhook_secret_get(*, user: User) -> WebhookSecret | None:
    return WebhookSecret.objects.filter(user=user).first()
