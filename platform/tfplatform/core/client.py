"""Where a request comes from, decided in one place for throttles and sign-in lockouts."""

from typing import Any

from rest_framework.throttling import BaseThrottle


def client_address(request: Any) -> str | None:
    """The client's address as DRF's throttles see it: the socket's peer, or with
    REST_FRAMEWORK["NUM_PROXIES"] set, the address that many of our proxies put in
    X-Forwarded-For (what a client writes there itself is never taken)."""
    return BaseThrottle().get_ident(request) or None
