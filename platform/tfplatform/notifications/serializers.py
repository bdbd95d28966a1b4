from typing import Any

from rest_framework import serializers

from tfplatform.core.serializers import QuerySerializer
from tfplatform.notifications.events import EventKind, event_summary
from tfplatform.notifications.models import (
    URL_LENGTH,
    Delivery,
    DeliveryAttempt,
    Subscription,
)

EVENTS_HELP = "Events to be told of: " + ", ".join(
    f"`{kind.value}` ({kind.label.lower()})" for kind in EventKind)


class SubscriptionSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    events = serializers.ListField(child=serializers.ChoiceField(choices=EventKind.choices),
                                   read_only=True)

    class Meta:
        model = Subscription
        fields = ["id", "owner", "events", "scope", "webhook_url", "email", "created_at",
                  "updated_at"]
        read_only_fields = fields


class SubscriptionSavedSerializer(SubscriptionSerializer):
    webhook_secret = serializers.CharField(
        allow_null=True, read_only=True,
        help_text="Your webhook secret, when this request made it (your first webhook): shown "
                  "this once. Otherwise null; `POST /api/v1/notifications/secret/rotate/` "
                  "makes a new one.")

    class Meta(SubscriptionSerializer.Meta):
        fields = [*SubscriptionSerializer.Meta.fields, "webhook_secret"]
        read_only_fields = fields


class SubscriptionWriteSerializer(serializers.Serializer):
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=EventKind.choices), min_length=1,
        max_length=len(EventKind.values), help_text=EVENTS_HELP)
    scope = serializers.ChoiceField(
        choices=Subscription.Scope.choices, default=Subscription.Scope.MINE,
        help_text="`mine`: events of your own objects; `team`: your team's too.")
    webhook_url = serializers.CharField(
        max_length=URL_LENGTH, allow_blank=True, default="",
        help_text="An http(s) URL on a public address that gets each event as a signed POST.")
    email = serializers.BooleanField(default=False,
                                     help_text="Also email each event to your address.")


class WebhookSecretSerializer(serializers.Serializer):
    prefix = serializers.CharField(allow_null=True,
                                   help_text="The secret's first characters; null: none yet.")
    created_at = serializers.DateTimeField(allow_null=True)


class WebhookSecretIssuedSerializer(serializers.Serializer):
    secret = serializers.CharField(help_text="Shown this once, never again.")
    prefix = serializers.CharField()
    created_at = serializers.DateTimeField()


class DeliveryAttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeliveryAttempt
        fields = ["number", "at", "status_code", "error", "duration_ms"]
        read_only_fields = fields


class DeliverySerializer(serializers.ModelSerializer):
    event = serializers.ChoiceField(source="event.kind", choices=EventKind.choices,
                                    read_only=True)
    event_id = serializers.IntegerField(read_only=True)
    summary = serializers.SerializerMethodField()
    recipient = serializers.CharField(source="recipient.username", read_only=True)
    attempts = DeliveryAttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Delivery
        fields = ["id", "event", "event_id", "summary", "recipient", "subscription", "channel",
                  "target", "state", "attempt_count", "next_attempt_at", "created_at",
                  "finished_at", "attempts"]
        read_only_fields = fields

    def get_summary(self, delivery: Delivery) -> str:
        payload: dict[str, Any] = delivery.event.payload
        return event_summary(kind=delivery.event.kind, payload=payload)


class OwnerQuerySerializer(QuerySerializer):
    user = serializers.CharField(
        required=False, max_length=150,
        help_text="Staff: this user's instead of your own (anyone else sees only their own).")


class DeliveryQuerySerializer(OwnerQuerySerializer):
    state = serializers.ChoiceField(choices=Delivery.State.choices, required=False)
    channel = serializers.ChoiceField(choices=Delivery.Channel.choices, required=False)
    event = serializers.ChoiceField(choices=EventKind.choices, required=False)
    subscription = serializers.IntegerField(required=False, min_value=1, max_value=2**63 - 1)
