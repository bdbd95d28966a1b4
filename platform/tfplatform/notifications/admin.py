"""Staff see every subscription (and may remove one that misbehaves) and the delivery log."""

from django.contrib import admin
from django.http import HttpRequest

from tfplatform.notifications.models import Delivery, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = ["id", "owner", "events", "scope", "webhook_url", "email", "created_at"]
    list_filter = ["scope", "email"]
    search_fields = ["owner__username", "webhook_url"]
    # Made and changed through the API or the account page, where the URL is checked.
    readonly_fields = ["owner", "events", "scope", "webhook_url", "email"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


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
