"""The cache (Redis: throttles, token lookups) is away: the API answers 503 with its JSON error
and Retry-After, never a 500; once it is back, it answers."""

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests import live
from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db


def test_without_its_cache_the_api_answers_503_and_recovers(settings: Any) -> None:
    user = UserFactory()
    working = settings.CACHES
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": f"redis://127.0.0.1:{live.free_port()}/1"}}
    client = APIClient(raise_request_exception=False)
    answer = client.post("/api/v1/auth/token/", {"username": user.username,
                                                  "password": PASSWORD}, format="json")
    assert answer.status_code == 503, answer.content
    assert answer.json() == {"error": "The cache is unavailable; try again shortly.",
                             "code": "unavailable"}
    assert int(answer["Retry-After"]) > 0
    page = Client(raise_request_exception=False).post("/login/", {
        "username": user.username, "password": PASSWORD})
    assert page.status_code in (302, 503)  # a page: never a 500

    settings.CACHES = working
    answer = client.post("/api/v1/auth/token/", {"username": user.username,
                                                  "password": PASSWORD}, format="json")
    assert answer.status_code == 200, answer.content
