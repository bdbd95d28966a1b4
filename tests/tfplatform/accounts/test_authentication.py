"""API tokens are checked against the database at most once per cache time, per web process."""

from typing import Any

import pytest
from cachetools import TTLCache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from tests.factories import PASSWORD, UserFactory
from tfplatform.accounts import authentication, token_cache
from tfplatform.accounts.models import ApiToken
from tfplatform.accounts.tokens import api_token_issue

pytestmark = pytest.mark.django_db


def token_client(user: Any) -> APIClient:
    client = APIClient()
    answer = client.post(
        "/api/v1/auth/token/", {"username": user.username, "password": PASSWORD}, format="json"
    )
    client.credentials(HTTP_AUTHORIZATION=f"Token {answer.json()['token']}")
    return client


def token_queries(client: APIClient) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/api/v1/experiments/").status_code == 200
    return sum("accounts_apitoken" in query["sql"] and "SELECT" in query["sql"]
               for query in captured.captured_queries)


def test_a_checked_token_is_not_looked_up_again() -> None:
    client = token_client(UserFactory())
    assert token_queries(client) == 1
    assert token_queries(client) == 0


def test_a_deleted_token_is_refused_once_the_cache_time_has_passed(monkeypatch: Any) -> None:
    clock = [0.0]
    monkeypatch.setattr(
        token_cache, "_checked", TTLCache(maxsize=10, ttl=1.0, timer=lambda: clock[0])
    )
    user = UserFactory()
    client = token_client(user)
    assert client.get("/api/v1/experiments/").status_code == 200
    ApiToken.objects.filter(user=user).delete()  # revoked through another web process
    clock[0] = 0.5
    assert client.get("/api/v1/experiments/").status_code == 200  # within the cache time
    clock[0] = 1.5
    answer = client.get("/api/v1/experiments/")
    assert answer.status_code == 401
    assert answer.json() == {
        "error": "Invalid, expired or revoked token.", "code": "authentication_failed"}


def test_each_request_gets_its_own_user_object() -> None:
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    user = UserFactory()
    _, key = api_token_issue(user=user, name="test")
    check = authentication.CachedTokenAuthentication()
    first = check.authenticate(Request(APIRequestFactory().get(
        "/", HTTP_AUTHORIZATION=f"Token {key}")))
    second = check.authenticate(Request(APIRequestFactory().get(
        "/", HTTP_AUTHORIZATION=f"Token {key}")))
    assert first is not None and second is not None
    assert first[0] == second[0] == user and first[0] is not second[0]
    assert first[0]._state is not second[0]._state
    first[0].username = "changed-by-a-view"
    assert second[0].username == user.username


def test_a_user_deactivated_in_this_process_is_refused_at_once() -> None:
    """However it happens (the admin, a shell): the cache does not outlive it here
    (accounts/receivers.py), and the database refuses an inactive user's token."""
    user = UserFactory()
    client = token_client(user)
    assert client.get("/api/v1/experiments/").status_code == 200  # checked, and cached
    user.is_active = False
    user.save()
    assert ApiToken.objects.filter(user=user).exists()  # not revoked: refused all the same
    assert client.get("/api/v1/experiments/").status_code == 401
