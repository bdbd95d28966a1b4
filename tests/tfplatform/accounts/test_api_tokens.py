"""API tokens are kept hashed, expire, are listed and revoked by their owner alone (API, page,
`tfp logout`), and all end when the owner's password changes."""

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import PASSWORD, UserFactory
from tfplatform.accounts import token_cache
from tfplatform.accounts.models import ApiToken
from tfplatform.accounts.tokens import api_token_digest, api_token_issue

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_token_cache() -> None:
    token_cache.token_cache_clear()


def sign_in(user: Any, **extra: Any) -> Any:
    return APIClient().post("/api/v1/auth/token/", {"username": user.username,
                                                    "password": PASSWORD, **extra},
                            format="json")


def signed(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_only_a_hash_of_the_key_is_kept_and_the_list_never_shows_keys() -> None:
    user = UserFactory()
    issued = sign_in(user, name="laptop", days=7).json()
    key = issued["token"]
    assert key.startswith("tfp_") and len(key) > 40
    [stored] = ApiToken.objects.filter(user=user)
    assert stored.digest == api_token_digest(key=key) and key not in stored.digest
    assert not ApiToken.objects.filter(digest=key).exists()
    assert stored.expires_at - timezone.now() < timedelta(days=7, minutes=1)
    listed = signed(key).get("/api/v1/auth/tokens/").json()
    assert [(t["id"], t["name"], t["prefix"]) for t in listed] == [
        (stored.pk, "laptop", key[:12])]
    assert key not in str(listed)


def test_each_sign_in_is_its_own_token_and_revoking_one_leaves_the_other() -> None:
    user = UserFactory()
    first, second = sign_in(user).json(), sign_in(user).json()
    assert first["token"] != second["token"]
    assert signed(first["token"]).delete(
        f"/api/v1/auth/tokens/{second['id']}/").status_code == 204
    assert signed(second["token"]).get("/api/v1/experiments/").status_code == 401
    assert signed(first["token"]).get("/api/v1/experiments/").status_code == 200


def test_nobody_else_sees_or_revokes_your_tokens() -> None:
    alice, bob = UserFactory(), UserFactory()
    alices = sign_in(alice).json()
    bobs = signed(sign_in(bob).json()["token"])
    assert [t["id"] for t in bobs.get("/api/v1/auth/tokens/").json()] != [alices["id"]]
    assert alices["id"] not in [t["id"] for t in bobs.get("/api/v1/auth/tokens/").json()]
    refused = bobs.delete(f"/api/v1/auth/tokens/{alices['id']}/")
    assert refused.status_code == 404 and refused.json()["error"]
    assert signed(alices["token"]).get("/api/v1/experiments/").status_code == 200


def test_an_expired_token_is_refused() -> None:
    user = UserFactory()
    token, key = api_token_issue(user=user, name="old")
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    answer = signed(key).get("/api/v1/experiments/")
    assert answer.status_code == 401
    assert answer.json() == {
        "error": "Invalid, expired or revoked token.", "code": "authentication_failed"}


@pytest.mark.parametrize("days", [0, 366, "soon"])
def test_a_lifetime_out_of_bounds_is_a_400(days: Any) -> None:
    answer = sign_in(UserFactory(), days=days)
    assert answer.status_code == 400 and answer.json()["days"]


def test_revoking_the_current_token_is_logging_out() -> None:
    key = sign_in(UserFactory()).json()["token"]
    assert signed(key).delete("/api/v1/auth/tokens/current/").status_code == 204
    assert signed(key).get("/api/v1/experiments/").status_code == 401


def test_a_password_change_revokes_every_token() -> None:
    user = UserFactory()
    keys = [sign_in(user).json()["token"] for _ in range(2)]
    browser = Client()
    browser.force_login(user)
    changed = browser.post("/account/password/", {
        "old_password": PASSWORD, "new_password1": "a-new-long-passphrase-42",
        "new_password2": "a-new-long-passphrase-42"})
    assert changed.status_code == 302, changed.content
    assert not ApiToken.objects.filter(user=user).exists()
    for key in keys:
        assert signed(key).get("/api/v1/experiments/").status_code == 401
    # The admin's and `changepassword`'s way (set_password, save) does the same.
    key = api_token_issue(user=user, name="again")[1]
    user.set_password("yet-another-passphrase-43")
    user.save()
    assert signed(key).get("/api/v1/experiments/").status_code == 401


def test_the_tokens_page_issues_shows_once_and_revokes() -> None:
    user = UserFactory()
    browser = Client()
    browser.force_login(user)
    page = browser.post("/account/tokens/", {"name": "notebook", "days": "30"})
    assert page.status_code == 200
    [token] = ApiToken.objects.filter(user=user)
    html = page.content.decode()
    key = html.split('id="issued-key">')[1].split("<")[0]
    assert token.digest == api_token_digest(key=key)
    assert page["Cache-Control"].startswith("max-age=0")
    again = browser.get("/account/tokens/").content.decode()
    assert key not in again and token.prefix in again
    other = Client()
    other.force_login(UserFactory())
    assert other.post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    assert ApiToken.objects.filter(pk=token.pk).exists()  # not theirs to revoke
    assert browser.post(f"/account/tokens/{token.pk}/revoke/").status_code == 302
    assert not ApiToken.objects.filter(pk=token.pk).exists()


def test_plain_keys_from_before_become_hashed_tokens_that_still_sign_in() -> None:
    from importlib import import_module

    from django.apps import apps
    from rest_framework.authtoken.models import Token

    migration = import_module("tfplatform.accounts.migrations.0004_api_tokens_from_plain_keys")
    user = UserFactory()
    plain = Token.objects.create(user=user)
    migration.plain_keys_hash(apps, None)
    assert not Token.objects.exists()
    assert signed(plain.key).get("/api/v1/experiments/").status_code == 200
