"""Single sign-on's doors (accounts/oidc.py) against a real HTTP server standing for the
provider's discovery document and token endpoint: off unless configured; a provider that is
away or names another issuer stops single sign-on, never local accounts; ID tokens for another
client or issuer are refused; failed callbacks lock no one out; a session the provider signed
in is sent back to it once its check is due, on page loads only."""

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from axes.models import AccessAttempt
from django.contrib.auth import authenticate
from django.contrib.sessions.backends.db import SessionStore
from django.core.exceptions import SuspiciousOperation
from django.test import Client, RequestFactory

from tests.factories import PASSWORD, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.accounts.oidc import OidcBackend
from tfplatform.config.platform_settings import PlatformSettings

pytestmark = pytest.mark.django_db

BACKEND = "tfplatform.accounts.oidc.OidcBackend"
PAGE = {"HTTP_ACCEPT": "text/html,application/xhtml+xml"}


class Provider(ThreadingHTTPServer):
    issuer = ""
    # The issuer its discovery document names (another provider's, to test that it is refused).
    names_issuer = ""
    token_requests = 0


class ProviderHandler(BaseHTTPRequestHandler):
    server: Provider

    def do_GET(self) -> None:
        if self.path != "/.well-known/openid-configuration":
            return self._answer(404, {"error": "not_found"})
        issuer = self.server.issuer
        return self._answer(200, {
            "issuer": self.server.names_issuer or issuer,
            "authorization_endpoint": f"{issuer}/auth",
            "token_endpoint": f"{issuer}/token", "userinfo_endpoint": f"{issuer}/me",
            "jwks_uri": f"{issuer}/jwks"})

    def do_POST(self) -> None:
        self.server.token_requests += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer(400, {"error": "invalid_grant"})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def provider(sso: PlatformSettings,
             platform_settings_override: PlatformSettingsOverride) -> Iterator[Provider]:
    server = Provider(("127.0.0.1", 0), ProviderHandler)
    server.issuer = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    platform_settings_override(oidc_issuer=server.issuer)
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_off_unless_configured() -> None:
    client = Client()
    assert "Sign in with" not in client.get("/login/").content.decode()
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=c&state=s").status_code == 404


def test_the_login_page_offers_the_provider_and_sends_the_browser_there(
    provider: Provider
) -> None:
    client = Client()
    page = client.get("/login/?next=/models/").content.decode()
    assert "Sign in with Example IdP" in page
    assert 'href="/oidc/authenticate/?next=/models/"' in page
    answer = client.get("/oidc/authenticate/?next=/models/")
    assert answer.status_code == 302
    target = urlsplit(answer["Location"])
    query = parse_qs(target.query)
    assert f"{target.scheme}://{target.netloc}{target.path}" == f"{provider.issuer}/auth"
    assert query["client_id"] == ["platform"]
    assert query["redirect_uri"] == ["http://testserver/oidc/callback/"]
    assert query["code_challenge_method"] == ["S256"] and query["nonce"]
    assert query["scope"] == ["openid email profile"]


def test_an_unreachable_provider_stops_single_sign_on_not_local_accounts(
    sso: PlatformSettings, platform_settings_override: PlatformSettingsOverride
) -> None:
    platform_settings_override(oidc_issuer="http://127.0.0.1:9")  # discard: nothing answers
    client = Client()
    answer = client.get("/oidc/authenticate/")
    assert answer.status_code == 503
    assert "sign-in provider cannot be reached" in answer.content.decode()
    user = UserFactory()
    signed_in = client.post("/login/", {"username": user.username, "password": PASSWORD})
    assert signed_in.status_code == 302 and "_auth_user_id" in client.session


def test_a_discovery_document_naming_another_issuer_is_refused(provider: Provider) -> None:
    provider.names_issuer = "https://attacker.example.org"
    answer = Client().get("/oidc/authenticate/")
    assert answer.status_code == 503
    assert "names another issuer" in answer.content.decode()


def test_id_tokens_for_another_client_or_issuer_are_refused(
    provider: Provider, platform_settings_override: PlatformSettingsOverride
) -> None:
    # HS256: signed with the client's secret, so the test can sign one as the provider would.
    platform_settings_override(oidc_sign_algorithm="HS256")
    backend = OidcBackend()
    now = int(time.time())

    def token(**claims: Any) -> str:
        return jwt.encode({"iss": provider.issuer, "aud": "platform", "sub": "u-1",
                           "nonce": "n", "iat": now, "exp": now + 60, **claims},
                          "client-secret-of-the-platform-at-the-idp", algorithm="HS256")

    assert backend.verify_token(token(), nonce="n")["sub"] == "u-1"
    assert backend.verify_token(token(aud=["other", "platform"]), nonce="n")["sub"] == "u-1"
    for bad in (token(aud="another-client"), token(iss="https://attacker.example.org"),
                token(nonce="replayed")):
        with pytest.raises(SuspiciousOperation):
            backend.verify_token(bad, nonce="n")


def test_failed_callbacks_lock_nobody_out(provider: Provider) -> None:
    """Axes counts failed password sign-ins per username and address; the provider's refusals
    (here: its token endpoint refusing the code) carry no username and are not counted."""
    for _ in range(8):
        request = RequestFactory().get("/oidc/callback/", {"code": "c", "state": "s"})
        request.session = SessionStore()
        assert authenticate(request=request, nonce="n", code_verifier="v" * 43) is None
    assert provider.token_requests == 8  # each went to the provider, none was locked out
    assert not AccessAttempt.objects.exists()


def test_a_password_cannot_sign_in_through_the_provider_backend(provider: Provider) -> None:
    user = UserFactory()
    request = RequestFactory().post("/login/")
    assert OidcBackend().authenticate(request, username=user.username, password=PASSWORD) is None


def test_a_deactivated_users_session_ends(provider: Provider) -> None:
    user = UserFactory()
    client = Client()
    client.force_login(user, backend=BACKEND)
    assert client.get("/account/tokens/", HTTP_HX_REQUEST="true").status_code == 200
    user.is_active = False
    user.save()
    assert client.get("/account/tokens/", HTTP_HX_REQUEST="true").status_code == 302


def test_a_provider_session_is_checked_again_on_page_loads_once_due(provider: Provider) -> None:
    client = Client()
    client.force_login(UserFactory(), backend=BACKEND)
    session = client.session
    session["oidc_id_token_expiration"] = time.time() + 600
    session.save()
    assert client.get("/account/tokens/", **PAGE).status_code == 200  # not due yet
    session["oidc_id_token_expiration"] = time.time() - 1
    session.save()
    # Polls and fetches cannot follow the provider's redirect: the next page load goes instead.
    assert client.get("/account/tokens/", HTTP_HX_REQUEST="true", **PAGE).status_code == 200
    assert client.get("/account/tokens/", HTTP_ACCEPT="application/json").status_code == 200
    answer = client.get("/account/tokens/", **PAGE)
    assert answer.status_code == 302
    assert answer["Location"].startswith(f"{provider.issuer}/auth?")
    assert parse_qs(urlsplit(answer["Location"]).query)["prompt"] == ["none"]


def test_a_provider_away_puts_the_check_off_rather_than_failing_pages(
    sso: PlatformSettings, platform_settings_override: PlatformSettingsOverride
) -> None:
    platform_settings_override(oidc_issuer="http://127.0.0.1:9")  # discard: nothing answers
    client = Client()
    client.force_login(UserFactory(), backend=BACKEND)
    assert client.get("/account/tokens/", **PAGE).status_code == 200


def test_a_local_accounts_session_is_never_sent_to_the_provider(provider: Provider) -> None:
    client = Client()
    client.force_login(UserFactory(), backend="django.contrib.auth.backends.ModelBackend")
    assert client.get("/account/tokens/", **PAGE).status_code == 200
