from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from tfplatform.accounts import tokens
from tfplatform.accounts.models import ApiToken
from tfplatform.accounts.services import sign_in_check
from tfplatform.core.errors import NotFound

MAX_TOKEN_DAYS = 365


class SignInSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)
    name = serializers.CharField(max_length=100, required=False, default="api",
                                 help_text="What the token is for, as its list shows it.")
    days = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_TOKEN_DAYS,
        help_text=f"How long it lives (default {settings.PLATFORM.api_token_days} days).")


class ApiTokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "expires_at", "last_used_at"]


class IssuedTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(help_text="The key: shown this once, never stored.")

    class Meta(ApiTokenSerializer.Meta):
        fields = ["token", *ApiTokenSerializer.Meta.fields]


class TokenObtainApi(APIView):
    """POST {"username", "password"} → a new token; rate-limited per client address."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    parser_classes = [JSONParser, FormParser, MultiPartParser]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "auth"

    @extend_schema(request=SignInSerializer, responses={200: IssuedTokenSerializer})
    def post(self, request: Request) -> Response:
        # The shape first: a username the lockout's lookup cannot store (a NUL byte in
        # PostgreSQL) is a 400 like any other bad input.
        shape = SignInSerializer(data=request.data)
        shape.is_valid(raise_exception=True)
        sign_in_check(request=request._request, username=shape.validated_data["username"])
        credentials = AuthTokenSerializer(data=request.data, context={"request": request})
        credentials.is_valid(raise_exception=True)
        user = credentials.validated_data["user"]
        token, key = tokens.api_token_issue(
            user=user, name=shape.validated_data["name"], days=shape.validated_data.get("days"),
            actor=user)
        return Response(IssuedTokenSerializer({**ApiTokenSerializer(token).data, "token": key})
                        .data)


class TokenListApi(APIView):
    """Your own tokens, newest first; never their keys."""

    @extend_schema(responses=ApiTokenSerializer(many=True))
    def get(self, request: Request) -> Response:
        found = tokens.api_token_list(user=request.user)  # type: ignore[arg-type]
        return Response(ApiTokenSerializer(found, many=True).data)


class TokenRevokeApi(APIView):
    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request, token_id: int) -> Response:
        tokens.api_token_revoke(user=request.user, token_id=token_id,  # type: ignore[arg-type]
                                actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TokenRevokeCurrentApi(APIView):
    """Revokes the token this request is signed with (`tfp logout`)."""

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request) -> Response:
        if not isinstance(request.auth, ApiToken):
            raise NotFound("This request is not signed with an API token.")
        tokens.api_token_revoke(user=request.user,  # type: ignore[arg-type]
                                token_id=request.auth.pk, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
