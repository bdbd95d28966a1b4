"""/api/v1/notifications/…, listed among the API's paths (config/urls.py)."""

from django.urls import path

from tfplatform.notifications import api

urlpatterns = [
    path("notifications/subscriptions/", api.SubscriptionListCreateApi.as_view(),
         name="api-notification-subscriptions"),
    path("notifications/subscriptions/<int:subscription_id>/",
         api.SubscriptionDetailApi.as_view(), name="api-notification-subscription"),
    path("notifications/secret/", api.WebhookSecretApi.as_view(),
         name="api-notification-secret"),
    path("notifications/secret/rotate/", api.WebhookSecretRotateApi.as_view(),
         name="api-notification-secret-rotate"),
    path("notifications/deliveries/", api.DeliveryListApi.as_view(),
         name="api-notification-deliveries"),
]
