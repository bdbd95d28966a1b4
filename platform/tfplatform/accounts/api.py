from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.throttling import ScopedRateThrottle


class TokenObtainApi(ObtainAuthToken):
    """POST {"username", "password"} → {"token"}; rate-limited per client address."""

    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "auth"
