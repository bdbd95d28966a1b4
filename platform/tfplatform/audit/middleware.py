"""The request being served, for the audit log: its client address, and (for the hooks Django
calls without one, such as a password validator) who is signed in. Outside a request (the
scheduler, a worker node, a management command) there is none."""

import ipaddress
from collections.abc import Callable
from contextvars import ContextVar

from django.contrib.auth.base_user import AbstractBaseUser
from django.http import HttpRequest, HttpResponse

from tfplatform.core.client import client_address

_request: ContextVar[HttpRequest | None] = ContextVar("audit_request", default=None)


class AuditRequestMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = _request.set(request)
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)


def request_client_address() -> str | None:
    """The client's address as the throttles see it (the socket's peer, or behind
    PLATFORM_NUM_PROXIES proxies what they put in X-Forwarded-For); None when it is not an
    address (a proxy's header holds anything a client sent it)."""
    request = _request.get()
    if request is None:
        return None
    address = client_address(request)
    try:
        return str(ipaddress.ip_address(address.strip())) if address else None
    except ValueError:
        return None


def request_user() -> AbstractBaseUser | None:
    """Who is signed in on the request being served (a session, or the API token DRF checked),
    for hooks that are not handed the acting user."""
    request = _request.get()
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    return user
