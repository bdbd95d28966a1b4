"""Subscriptions to events, each user's webhook secret, the events published, and the log of
every delivery and its attempts."""

from django.conf import settings
from django.db import models

from tfplatform.notifications.events import EventKind

URL_LENGTH = 2000


class WebhookSecret(models.Model):
    """What a user's webhooks are signed with. Only a salt is kept: the secret is derived from
    it and the platform's secret key (signing.py), so a copy of the database signs nothing.
    Rotating replaces the salt, and with it the secret."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_secret"
    )
    salt = models.CharField(max_length=64)
    # The secret's first characters, enough to tell which one a receiver holds.
    prefix = models.CharField(max_length=16)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"webhook secret {self.prefix}… of user #{self.user_id}"


class Subscription(models.Model):
    class Scope(models.TextChoices):
        MINE = "mine", "My own objects"
        # Also the objects of the owner's team (as the owner's team is when the event happens):
        # the same objects the owner may see.
        TEAM = "team", "My team's objects too"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
        related_name="notification_subscriptions",
    )
    # EventKind values, each once.
    events = models.JSONField(default=list)
    scope = models.CharField(max_length=10, choices=Scope.choices, default=Scope.MINE)
    webhook_url = models.CharField(max_length=URL_LENGTH, blank=True)
    # To the owner's own address, as it is when the event happens.
    email = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"subscription #{self.pk} of user #{self.owner_id}"


class Event(models.Model):
    """Something that happened to one object, as its app published it (plain values)."""

    kind = models.CharField(max_length=40, choices=EventKind.choices)
    # The object's owner and team.
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="+")
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk}"


class Delivery(models.Model):
    """One event to one target of one subscription: a webhook URL or an email address."""

    class Channel(models.TextChoices):
        WEBHOOK = "webhook"
        EMAIL = "email"

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries")
    # Kept when the subscription is removed: the log stays its recipient's.
    subscription = models.ForeignKey(
        Subscription, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_deliveries"
    )
    channel = models.CharField(max_length=10, choices=Channel.choices)
    target = models.CharField(max_length=URL_LENGTH, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempt_count = models.PositiveIntegerField(default=0)
    # When its next attempt is due (pending only).
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # An attempt holds it until then: a copy of its message finds it taken and does nothing.
    lease_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["recipient", "-created_at"]),
            models.Index(fields=["state", "next_attempt_at"]),
        ]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"delivery #{self.pk} ({self.channel}, {self.state})"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    # The receiver's HTTP status (webhooks), or none: it never answered, or an email.
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["delivery_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"],
                                    name="delivery_attempt_number_unique"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery #{self.delivery_id}"
