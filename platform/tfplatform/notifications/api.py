"""REST API of notifications: your subscriptions, your webhook secret, your delivery log."""

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tfplatform.core.errors import NotFound
from tfplatform.notifications import selectors, services
from tfplatform.notifications.models import Delivery, Subscription
from tfplatform.notifications.serializers import (
    DeliveryQuerySerializer,
    DeliverySerializer,
    OwnerQuerySerializer,
    SubscriptionSavedSerializer,
    SubscriptionSerializer,
    SubscriptionWriteSerializer,
    WebhookSecretIssuedSerializer,
    WebhookSecretSerializer,
)


def _saved(subscription: Subscription, secret: str | None) -> dict[str, Any]:
    return SubscriptionSavedSerializer({**SubscriptionSerializer(subscription).data,
                                        "webhook_secret": secret}).data


class SubscriptionListCreateApi(generics.ListAPIView):
    """Your subscriptions to events of your objects (and, scope `team`, your team's), each
    delivered to a signed webhook and/or by email."""

    serializer_class = SubscriptionSerializer
    filter_backends: list[Any] = []

    @extend_schema(parameters=[OwnerQuerySerializer])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Subscription]:
        query = OwnerQuerySerializer(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        return selectors.subscription_list(user=self.request.user,
                                           of_username=query.validated_data.get("user"))

    @extend_schema(request=SubscriptionWriteSerializer,
                   responses={201: SubscriptionSavedSerializer})
    def post(self, request: Request) -> Response:
        serializer = SubscriptionWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        subscription, secret = services.subscription_create(
            owner=request.user,  # type: ignore[arg-type]
            request=services.SubscriptionRequest(**serializer.validated_data))
        return Response(_saved(subscription, secret), status=status.HTTP_201_CREATED)


class SubscriptionDetailApi(APIView):
    @extend_schema(responses=SubscriptionSerializer)
    def get(self, request: Request, subscription_id: int) -> Response:
        subscription = selectors.subscription_get(user=request.user,
                                                  subscription_id=subscription_id)
        return Response(SubscriptionSerializer(subscription).data)

    @extend_schema(request=SubscriptionWriteSerializer,
                   responses=SubscriptionSavedSerializer)
    def patch(self, request: Request, subscription_id: int) -> Response:
        subscription = self._own(request=request, subscription_id=subscription_id)
        serializer = SubscriptionWriteSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        updated, secret = services.subscription_update(
            subscription=subscription, changes=dict(serializer.validated_data))
        return Response(_saved(updated, secret))

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request, subscription_id: int) -> Response:
        services.subscription_delete(
            subscription=selectors.subscription_get(user=request.user,
                                                    subscription_id=subscription_id),
            actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _own(self, *, request: Request, subscription_id: int) -> Subscription:
        """Staff may read and remove another's subscription, not rewrite it."""
        subscription = selectors.subscription_get(user=request.user,
                                                  subscription_id=subscription_id)
        if subscription.owner_id != request.user.pk:
            raise NotFound("Subscription not found.")
        return subscription


class WebhookSecretApi(APIView):
    """Which secret signs your webhooks now (its first characters), never the secret; nulls
    before your first webhook subscription (or a rotation) made one."""

    @extend_schema(responses=WebhookSecretSerializer)
    def get(self, request: Request) -> Response:
        secret = selectors.webhook_secret_get(user=request.user)  # type: ignore[arg-type]
        shown = {"prefix": secret.prefix if secret else None,
                 "created_at": secret.created_at if secret else None}
        return Response(WebhookSecretSerializer(shown).data)


class WebhookSecretRotateApi(APIView):
    """A new secret, shown this once; from now on every webhook of yours is signed with it."""

    @extend_schema(request=None, responses={201: WebhookSecretIssuedSerializer})
    def post(self, request: Request) -> Response:
        secret = services.webhook_secret_rotate(user=request.user)  # type: ignore[arg-type]
        saved = selectors.webhook_secret_get(user=request.user)  # type: ignore[arg-type]
        assert saved is not None
        return Response(WebhookSecretIssuedSerializer(
            {"secret": secret, "prefix": saved.prefix, "created_at": saved.created_at}).data,
            status=status.HTTP_201_CREATED)


class DeliveryListApi(generics.ListAPIView):
    """Your delivery log, newest first: each event sent to each target, with every attempt
    (its time, the receiver's HTTP status or the error)."""

    serializer_class = DeliverySerializer
    filter_backends: list[Any] = []

    @extend_schema(parameters=[DeliveryQuerySerializer])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Delivery]:
        query = DeliveryQuerySerializer(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        filters = dict(query.validated_data)
        return selectors.delivery_list(user=self.request.user,
                                       of_username=filters.pop("user", None), filters=filters)
