"""The OpenID provider the platform signs users in with, as settings.PLATFORM configures it:
mozilla-django-oidc's settings (its `OIDC_*` names) answered from there, and the provider's
endpoints from its discovery document, fetched when first needed rather than at start-up, so a
provider that is away stops single sign-on, never the platform or its local accounts."""

import threading
from typing import Any
from urllib.parse import urlsplit

import requests
from cachetools import TTLCache
from django.conf import settings
from django.urls import reverse
from mozilla_django_oidc.utils import import_from_settings

from tfplatform.core.errors import Unavailable

DISCOVERY_PATH = "/.well-known/openid-configuration"
# Seconds a call to the provider (discovery, token, userinfo, JWKS) may take: a sign-in waits
# on it, and a provider that hangs must not hold a web worker.
TIMEOUT_SECONDS = 10
# Providers rotate keys and move endpoints rarely; a process reads the document again hourly.
DISCOVERY_SECONDS = 3600
# mozilla-django-oidc's endpoint settings, and where the discovery document gives each.
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
_lock = threading.Lock()
_documents: TTLCache[str, dict[str, str]] = TTLCache(maxsize=4, ttl=DISCOVERY_SECONDS)


def oidc_enabled() -> bool:
    return bool(settings.PLATFORM.oidc_issuer)


def oidc_provider_name() -> str:
    config = settings.PLATFORM
    return config.oidc_provider_name or urlsplit(config.oidc_issuer).hostname or "your provider"


def oidc_issuer() -> str:
    """The issuer as the provider names itself (its discovery document's, which ID tokens
    carry), not as configured: the two may differ by a final slash."""
    return oidc_discovery()["issuer"]


def oidc_setting(attr: str, *default: Any) -> Any:
    """mozilla-django-oidc's `get_settings`: its `OIDC_*` settings from settings.PLATFORM and the
    discovery document; anything else from Django's settings, as it would read them."""
    if attr in ENDPOINTS:
        return oidc_discovery()[ENDPOINTS[attr]]
    config = settings.PLATFORM
    ours: dict[str, Any] = {
        "OIDC_RP_CLIENT_ID": config.oidc_client_id,
        "OIDC_RP_CLIENT_SECRET": config.oidc_client_secret,
        "OIDC_RP_SIGN_ALGO": config.oidc_sign_algorithm,
        "OIDC_RP_SCOPES": " ".join(config.oidc_scopes),
        # A code intercepted on its way back is worth nothing without the verifier.
        "OIDC_USE_PKCE": True,
        "OIDC_USE_NONCE": True,
        "OIDC_TIMEOUT": TIMEOUT_SECONDS,
        "OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS": config.oidc_recheck_seconds,
        "LOGIN_REDIRECT_URL_FAILURE": reverse("login"),
    }
    if attr in ours:
        return ours[attr]
    return import_from_settings(attr, *default)


def oidc_discovery() -> dict[str, str]:
    """The provider's issuer and endpoints, from its discovery document (OpenID Connect
    Discovery 1.0), fetched once an hour per process."""
    issuer = settings.PLATFORM.oidc_issuer
    with _lock:
        found = _documents.get(issuer)
    if found is not None:
        return found
    found = _discovery_fetch(issuer=issuer)
    with _lock:
        _documents[issuer] = found
    return found


def oidc_discovery_forget() -> None:
    with _lock:
        _documents.clear()


def _discovery_fetch(*, issuer: str) -> dict[str, str]:
    url = issuer.rstrip("/") + DISCOVERY_PATH
    try:
        response = requests.get(url, timeout=TIMEOUT_SECONDS)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as error:
        raise Unavailable(f"The sign-in provider cannot be reached ({url}: {error}); try again "
                          "later or sign in with a local account.") from error
    if not isinstance(document, dict):
        raise Unavailable(f"The sign-in provider's discovery document ({url}) is not an object.")
    # §4.3: the document's issuer is exactly the one asked for, or it is not this provider's.
    if str(document.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
        raise Unavailable(f"The sign-in provider at {url} names another issuer "
                          f"({document.get('issuer')!r}): check PLATFORM_OIDC_ISSUER.")
    endpoints = {"issuer": str(document["issuer"])}
    for key in ENDPOINTS.values():
        value = document.get(key)
        if not isinstance(value, str) or urlsplit(value).scheme not in ("https", "http"):
            raise Unavailable(f"The sign-in provider's discovery document ({url}) has no "
                              f"usable {key}.")
        endpoints[key] = value
    return endpoints
