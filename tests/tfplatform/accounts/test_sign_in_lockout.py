"""Repeated failed sign-ins lock that username out from that address, on every door: the login
page, the admin's login and the API token endpoint; throttles and lockouts key on the socket's
peer, never on an X-Forwarded-For the client wrote."""

import secrets
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

ATTACKER, NEIGHBOUR = "198.51.100.7", "198.51.100.8"


def _fail(post: Any, times: int) -> None:
    for attempt in range(times):
        post(password=f"wrong-{attempt}")


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_the_login_pages_lock_out_after_repeated_failures(path: str) -> None:
    user = UserFactory(is_staff=True)
    browser = Client(REMOTE_ADDR=ATTACKER)

    def post(*, password: str) -> Any:
        return browser.post(path, {"username": user.username, "password": password})

    _fail(post, settings.AXES_FAILURE_LIMIT)
    locked = post(password=PASSWORD)  # the right password, too late
    assert locked.status_code == 429
    assert "_auth_user_id" not in browser.session
    # Another address is not locked out of the same account.
    neighbour = Client(REMOTE_ADDR=NEIGHBOUR)
    answer = neighbour.post(path, {"username": user.username, "password": PASSWORD})
    assert answer.status_code == 302 and "_auth_user_id" in neighbour.session


def test_the_api_token_endpoint_locks_out_with_a_clear_error() -> None:
    user = UserFactory()
    client = APIClient(REMOTE_ADDR=ATTACKER)

    def post(*, password: str) -> Any:
        return client.post("/api/v1/auth/token/", {"username": user.username,
                                                   "password": password}, format="json")

    _fail(post, settings.AXES_FAILURE_LIMIT)
    locked = post(password=PASSWORD)
    assert locked.status_code == 429
    assert "Too many failed sign-ins" in locked.json()["error"]
    assert "token" not in locked.json()
    other = UserFactory()  # the lockout is this username's, not the address's
    answer = client.post("/api/v1/auth/token/", {"username": other.username,
                                                 "password": PASSWORD}, format="json")
    assert answer.status_code == 200 and answer.json()["token"]


def test_a_body_that_is_not_an_object_is_a_400() -> None:
    answer = APIClient(REMOTE_ADDR=NEIGHBOUR).post("/api/v1/auth/token/", [1, 2], format="json")
    assert answer.status_code == 400 and "error" in answer.json()


@pytest.mark.parametrize("username", ["a\x00b", "x" * 151])
def test_a_username_no_account_could_have_is_a_400_on_every_door(username: Any) -> None:
    """The API fuzzer's find: a NUL byte reached the lockout's lookup, a 500 on PostgreSQL."""
    answer = APIClient(REMOTE_ADDR=NEIGHBOUR).post(
        "/api/v1/auth/token/", {"username": username, "password": "p"}, format="json")
    assert answer.status_code == 400 and answer.json()["username"]
    for path in ("/login/", "/admin/login/"):
        page = Client(REMOTE_ADDR=NEIGHBOUR).post(path, {"username": str(username),
                                                         "password": "p"})
        assert page.status_code == 200  # the form again, with its error


def test_a_forged_forwarded_for_does_not_buy_a_fresh_throttle(monkeypatch: Any) -> None:
    from rest_framework.throttling import ScopedRateThrottle

    monkeypatch.setitem(ScopedRateThrottle.THROTTLE_RATES, "auth", "3/min")
    # An address of this run's own: throttle counts live in the shared cache for a minute.
    client = APIClient(REMOTE_ADDR=f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.9")
    answers = [
        client.post("/api/v1/auth/token/", {"username": "nobody", "password": "x"},
                    format="json", HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code
        for n in range(5)
    ]
    assert answers == [400, 400, 400, 429, 429]
