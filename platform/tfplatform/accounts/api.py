from typing import Any

from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle

from tfplatform.accounts.services import sign_in_check


class TokenObtainApi(ObtainAuthToken):
    """POST {"username", "password"} → {"token"}; rate-limited per client address."""

    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "auth"

    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = request.data
        username = str(data.get("username", "")) if hasattr(data, "get") else ""
        sign_in_check(request=request._request, username=username)
        return super().post(request, *args, **kwargs)
