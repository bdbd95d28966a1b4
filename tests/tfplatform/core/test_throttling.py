"""The inference rate limit: counted per fixed window, answered with the wait until the next."""

from typing import Any

import pytest
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory, force_authenticate
from rest_framework.throttling import ScopedRateThrottle

from tests.factories import UserFactory
from tfplatform.core.throttling import ScopedWindowRateThrottle

pytestmark = pytest.mark.django_db


class View:
    throttle_scope = "inference"


def allowed(user: Any, now: float) -> tuple[bool, float]:
    raw = APIRequestFactory().post("/")
    force_authenticate(raw, user=user)
    request = Request(raw)
    request.user = user
    throttle = ScopedWindowRateThrottle()
    throttle.timer = lambda: now  # type: ignore[method-assign]
    return throttle.allow_request(request, View()), throttle.wait()


def test_counts_per_window_and_per_user(monkeypatch: Any) -> None:
    monkeypatch.setitem(ScopedRateThrottle.THROTTLE_RATES, "inference", "2/min")
    first, second = UserFactory(), UserFactory()
    assert [allowed(first, 60.0 + s)[0] for s in (0, 1, 2)] == [True, True, False]
    assert allowed(first, 62.0)[1] == pytest.approx(58.0)  # Retry-After: to the window's end
    assert allowed(second, 62.0)[0] is True  # another user has a count of their own
    assert allowed(first, 120.0)[0] is True  # a new window starts from zero


def test_a_view_without_a_scope_is_not_limited() -> None:
    raw = APIRequestFactory().get("/")
    assert ScopedWindowRateThrottle().allow_request(Request(raw), object()) is True
