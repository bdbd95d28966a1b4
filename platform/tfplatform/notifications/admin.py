"""Staff see every subscription (and may remove one that misbehaves) and the delivery log."""

from django.contrib import admin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from tfplatform.notifications.models import Delivery, Subscription
from tfplatform.notifications.services import subscription_delete


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = ["id", "owner", "events", "scope", "webhook_url", "email", "created_at"]
    list_filter = ["scope", "email"]
    search_fields = ["owner__username", "webhook_url"]
    # Made and changed through the API or the account page, where the URL is checked.
    readonly_fields = ["owner", "events", "scope", "webhook_url", "email"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    # Removing is the service's: its pending deliveries stop, and another's is an audit row.
    def delete_model(self, request: HttpRequest, obj: Subscription) -> None:
        subscription_delete(subscription=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Subscription]) -> None:
        with transaction.atomic():
            for subscription in queryset:
                subscription_delete(subscription=subscription, actor=request.user)


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["id", "event", "recipient", "channel", "target", "state", "attempt_count",
                    "created_at"]
    list_filter = ["state", "channel"]
    search_fields = ["recipient__username", "target"]
    list_select_related = ["event", "recipient"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
