"""Single sign-on end to end: a real OpenID provider (npm's oidc-provider on Node.js, its own
login form), the platform as a live server and a real Chromium. The first sign-in makes the
user, in the team their groups claim names; a change of groups at the provider moves the team
at the session's next check with it; a user the provider takes out of the allowed group is
deactivated at their next sign-in, and their API token stops working."""

import json
import os
import select
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.sessions.backends.db import SessionStore
from rest_framework.test import APIClient

from tests.factories import TeamFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.web.conftest import ARTIFACTS
from tfplatform.accounts.models import ApiToken, User
from tfplatform.accounts.oidc_provider import oidc_discovery_forget
from tfplatform.accounts.tokens import api_token_issue

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

PROVIDER = Path(__file__).resolve().parent / "oidc_provider"
ALLOWED = "platform-users"


@dataclass
class Provider:
    issuer: str
    accounts: Path

    def account_set(self, login: str, **claims: Any) -> None:
        """The provider reads its accounts at every use: the next sign-in sees this."""
        self.accounts.write_text(json.dumps({login: claims}))


@pytest.fixture
def provider(live_server: Any, tmp_path: Path,
             platform_settings_override: PlatformSettingsOverride) -> Iterator[Provider]:
    node = shutil.which("node")
    if node is None or not (PROVIDER / "node_modules" / "oidc-provider").is_dir():
        if os.environ.get("CI"):
            pytest.fail("CI needs Node.js 20.19+ and the test provider's packages "
                        "(make oidc-provider)")
        pytest.skip("Node.js or the test provider's packages are missing (make oidc-provider)")
    accounts = tmp_path / "accounts.json"
    accounts.write_text("{}")
    secret = "the-platform-client-secret-at-the-test-provider"
    log = tmp_path / "provider.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [node, "provider.mjs"], cwd=PROVIDER, stdout=subprocess.PIPE, stderr=output,
            text=True, start_new_session=True,
            env={**os.environ, "ACCOUNTS_FILE": str(accounts), "CLIENT_ID": "platform",
                 "CLIENT_SECRET": secret, "REDIRECT_URIS": f"{live_server.url}/oidc/callback/"})
    assert process.stdout is not None
    try:
        # `ready <issuer>` once it listens; a start that hangs fails in a minute with its log
        # (one fresh-clone run hung here for pytest-timeout's 600 s, its log all but empty).
        if not select.select([process.stdout], [], [], 60)[0]:
            pytest.fail(f"the test OIDC provider did not start in 60 s: {log.read_text()}")
        ready = process.stdout.readline()
        assert ready.startswith("ready "), log.read_text()
        issuer = ready.split()[1]
        oidc_discovery_forget()
        platform_settings_override(
            oidc_issuer=issuer, oidc_provider_name="Test IdP", oidc_client_id="platform",
            oidc_client_secret=secret, oidc_scopes=("openid", "email", "profile", "groups"),
            oidc_allowed_groups=(ALLOWED,))
        yield Provider(issuer=issuer, accounts=accounts)
    finally:
        oidc_discovery_forget()
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def session_check_due(page: Any) -> None:
    """What PLATFORM_OIDC_RECHECK_SECONDS of waiting would do: the session's check is due."""
    cookie = next(c for c in page.context.cookies() if c["name"] == "sessionid")
    session = SessionStore(session_key=cookie["value"])
    session["oidc_id_token_expiration"] = 0
    session.save()


def test_sign_in_maps_groups_to_teams_and_a_removed_user_loses_access(
    browser: Any, live_server: Any, provider: Provider
) -> None:
    vision, nlp = TeamFactory(name="vision"), TeamFactory(name="nlp")
    claims = {"preferred_username": "alice", "email": "alice@example.org", "given_name": "Alice"}
    provider.account_set("alice-sub", **claims, groups=[ALLOWED, "vision"])
    base = str(live_server.url)
    page = browser.new_page()
    page.goto(f"{base}/login/")
    page.screenshot(path=str(ARTIFACTS / "login-with-sso.png"))
    page.click("text=Sign in with Test IdP")
    page.fill("input[name=login]", "alice-sub")  # the provider's own form
    page.fill("input[name=password]", "whatever the provider accepts")
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/experiments/")
    user = User.objects.get(oidc_identities__subject="alice-sub")
    assert (user.username, user.email, user.team) == ("alice", "alice@example.org", vision)
    assert page.inner_text(".who") == "alice"

    _, key = api_token_issue(user=user, name="automation")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/v1/experiments/").status_code == 200

    # The provider moves her to another group: her session's next check (a page load, sent to
    # the provider and back without a form) moves her team; her token goes on working.
    provider.account_set("alice-sub", **claims, groups=[ALLOWED, "nlp"])
    session_check_due(page)
    page.goto(f"{base}/experiments/")
    page.wait_for_url(f"{base}/experiments/")
    user.refresh_from_db()
    assert user.team == nlp and user.is_active
    assert api.get("/api/v1/experiments/").status_code == 200

    # Out of the allowed group: her next sign-in is refused and ends her access.
    provider.account_set("alice-sub", **claims, groups=["nlp"])
    page.click("button:has-text('Log out')")
    page.wait_for_url(f"{base}/login/")
    page.click("text=Sign in with Test IdP")  # the provider still knows her: no form
    page.wait_for_selector(".message.error")
    assert "none of the groups allowed" in page.inner_text(".message.error")
    page.screenshot(path=str(ARTIFACTS / "sso-refused.png"))
    assert page.url.startswith(f"{base}/login/")
    user.refresh_from_db()
    assert not user.is_active
    assert not ApiToken.objects.filter(user=user).exists()
    assert api.get("/api/v1/experiments/").status_code == 401
