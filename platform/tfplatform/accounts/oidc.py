"""OpenID Connect sign-in beside local accounts (mozilla-django-oidc): the authentication
backend, the views that start the code flow and take the provider's answer, and the middleware
that checks a web session with the provider again every PLATFORM_OIDC_RECHECK_SECONDS.

All are installed whether or not single sign-on is configured and stand aside while it is not,
so turning it on is a setting, not a change of middleware or URLs. mozilla-django-oidc reads its
`OIDC_*` settings through `get_settings`, answered here from settings.PLATFORM and the
provider's discovery document (oidc_provider.py) when a sign-in needs them, never when Django
loads a backend to check a local password."""

import logging
from collections.abc import Mapping
from typing import Any

import jwt
import requests
from django.contrib import auth, messages
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.deprecation import MiddlewareMixin
from django.utils.functional import cached_property
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.middleware import SessionRefresh
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from tfplatform.accounts.models import User
from tfplatform.accounts.oidc_provider import (
    oidc_enabled,
    oidc_issuer,
    oidc_provider_name,
    oidc_setting,
)
from tfplatform.accounts.oidc_users import oidc_user_sign_in
from tfplatform.core.errors import NotFound, PlatformError, Unavailable

logger = logging.getLogger(__name__)
# Where the backend leaves, for the callback's page, why the platform refused a sign-in.
REFUSAL = "oidc_refusal"
NOT_CONFIGURED = "Single sign-on is not configured on this platform."


def _setting(name: str) -> Any:
    """One of the attributes mozilla-django-oidc's classes set from settings in __init__, read
    when used instead."""
    return property(lambda self: oidc_setting(name))


def sign_in_lockout_exempt(request: HttpRequest, credentials: Mapping[str, Any] | None) -> bool:
    """django-axes' AXES_WHITELIST_CALLABLE. Axes locks out a username after failed password
    sign-ins; the provider's callback sends none. Its failures are the provider's to count:
    counted here under no username, they would lock everyone behind one address out of single
    sign-on."""
    return not (credentials or {}).get("username")


class OidcBackend(OIDCAuthenticationBackend):
    """Signs in whom the provider vouches for, at the end of the code flow, and never for a
    username and password."""

    get_settings = staticmethod(oidc_setting)
    OIDC_OP_TOKEN_ENDPOINT = _setting("OIDC_OP_TOKEN_ENDPOINT")
    OIDC_OP_USER_ENDPOINT = _setting("OIDC_OP_USER_ENDPOINT")
    OIDC_OP_JWKS_ENDPOINT = _setting("OIDC_OP_JWKS_ENDPOINT")
    OIDC_RP_CLIENT_ID = _setting("OIDC_RP_CLIENT_ID")
    OIDC_RP_CLIENT_SECRET = _setting("OIDC_RP_CLIENT_SECRET")
    OIDC_RP_SIGN_ALGO = _setting("OIDC_RP_SIGN_ALGO")
    OIDC_RP_IDP_SIGN_KEY = None  # the provider's keys come from its JWKS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Django makes a backend for every sign-in, local ones too: nothing is read here.
        self.UserModel = User

    def authenticate(self, request: Any, **kwargs: Any) -> User | None:
        if request is None or not oidc_enabled() or "nonce" not in kwargs or "username" in kwargs:
            return None
        try:
            return super().authenticate(request, **kwargs)
        except (requests.RequestException, SuspiciousOperation, jwt.PyJWTError,
                PlatformError) as error:
            # The provider refused the code, or answered what does not verify: no sign-in.
            logger.warning("Single sign-on failed: %s", error)
            return None

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """Beyond the signature and nonce mozilla-django-oidc checks: a token of this provider's
        (`iss`) for this client (`aud`), not one it gave another application."""
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = [audience] if isinstance(audience, str) else audience or []
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("The ID token is not for this client.")
        if payload.get("iss") != oidc_issuer():
            raise SuspiciousOperation("The ID token is not this provider's.")
        return payload

    def get_or_create_user(self, access_token: str, id_token: str,
                           payload: dict[str, Any]) -> User | None:
        userinfo = self.get_userinfo(access_token, id_token, payload)
        # Core §5.3.2: userinfo about another subject than the ID token's is not to be used.
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("The userinfo answer is about another subject.")
        try:
            # Some providers put the groups in the ID token only (Entra ID), others in userinfo.
            return oidc_user_sign_in(issuer=oidc_issuer(), claims={**payload, **userinfo})
        except PlatformError as refusal:
            setattr(self.request, REFUSAL, refusal.message)
            return None

    def get_user(self, user_id: int) -> User | None:
        # mozilla-django-oidc's returns inactive users too: a deactivated user's web session
        # would live on. ModelBackend's refuses them, as it does for local accounts.
        return ModelBackend.get_user(self, user_id)


class OidcSignInView(OIDCAuthenticationRequestView):
    """`Sign in with <provider>`: off to the provider's authorization endpoint."""

    get_settings = staticmethod(oidc_setting)
    OIDC_OP_AUTH_ENDPOINT = _setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
    OIDC_RP_CLIENT_ID = _setting("OIDC_RP_CLIENT_ID")

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc_enabled():
            raise NotFound(NOT_CONFIGURED)
        return super().get(request)


class OidcCallbackView(OIDCAuthenticationCallbackView):
    """The provider's answer: signed in, or back to the login page saying why not."""

    get_settings = staticmethod(oidc_setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc_enabled():
            raise NotFound(NOT_CONFIGURED)
        return super().get(request)

    def login_failure(self) -> HttpResponse:
        # A session check the provider or the platform refused ends the session it was for.
        if self.request.user.is_authenticated:
            auth.logout(self.request)
        messages.error(self.request, getattr(self.request, REFUSAL, None)
                       or f"Signing in with {oidc_provider_name()} did not succeed.")
        return super().login_failure()


class OidcSessionRefresh(SessionRefresh):
    """Sends a page load of a session the provider signed in, once its check is due, to the
    provider with `prompt=none`: it comes back at once, signed in again (groups and team read
    anew) or refused (the session ends: OidcCallbackView)."""

    get_settings = staticmethod(oidc_setting)
    OIDC_EXEMPT_URLS: list[str] = []
    OIDC_OP_AUTHORIZATION_ENDPOINT = _setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
    OIDC_RP_CLIENT_ID = _setting("OIDC_RP_CLIENT_ID")
    OIDC_RP_SCOPES = _setting("OIDC_RP_SCOPES")
    OIDC_STATE_SIZE = 32
    OIDC_NONCE_SIZE = 32
    OIDC_USE_NONCE = True
    OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_authentication_callback"

    def __init__(self, get_response: Any) -> None:
        MiddlewareMixin.__init__(self, get_response)

    @cached_property
    def exempt_urls(self) -> set[str]:
        return {reverse(name) for name in
                ("oidc_authentication_init", "oidc_authentication_callback", "login", "logout")}

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        try:
            return super().process_request(request)
        except Unavailable as error:
            # The provider is away: the session goes on until it can be checked, rather than
            # every page failing while the provider is down.
            logger.warning("Session check put off: %s", error)
            return None

    def is_refreshable_url(self, request: HttpRequest) -> bool:
        # A poll (htmx) or a fetch cannot follow a redirect to the provider: the next page load
        # is checked instead.
        page_load = ("HX-Request" not in request.headers
                     and "text/html" in request.headers.get("Accept", ""))
        return oidc_enabled() and page_load and bool(super().is_refreshable_url(request))
