from typing import Any

from rest_framework import serializers
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle

from tfplatform.accounts.services import sign_in_check


class SignInSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False)


class TokenObtainApi(ObtainAuthToken):
    """POST {"username", "password"} → {"token"}; rate-limited per client address."""

    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "auth"

    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # The shape first: a username the lockout's lookup cannot store (a NUL byte in
        # PostgreSQL) is a 400 like any other bad input.
        shape = SignInSerializer(data=request.data)
        shape.is_valid(raise_exception=True)
        sign_in_check(request=request._request, username=shape.validated_data["username"])
        return super().post(request, *args, **kwargs)
