"""Lists take any limit and offset a client sends and answer a page, never a 500: the fuzzer's
`?limit=2164205603286444146688` reached the database as an out-of-range LIMIT."""

import pytest
from rest_framework.test import APIClient

from tests.factories import EnvironmentFactory, UserFactory
from tfplatform.core.pagination import MAX_LIMIT

pytestmark = pytest.mark.django_db

HUGE = "2164205603286444146688"


@pytest.fixture
def client() -> APIClient:
    made = APIClient()
    made.force_authenticate(UserFactory())
    return made


@pytest.mark.parametrize("path", ["/api/v1/environments/", "/api/v1/experiments/",
                                  "/api/v1/models/", "/api/v1/nodes/"])
def test_a_limit_past_any_integer_is_cut_to_the_largest_page(client: APIClient, path: str
                                                              ) -> None:
    response = client.get(path, {"limit": HUGE})
    assert response.status_code == 200, response.content
    assert len(response.json()["results"]) <= MAX_LIMIT


def test_pages_hold_at_most_the_largest_limit(client: APIClient) -> None:
    EnvironmentFactory.create_batch(MAX_LIMIT + 5)
    page = client.get("/api/v1/environments/", {"limit": HUGE}).json()
    assert len(page["results"]) == MAX_LIMIT
    assert page["count"] >= MAX_LIMIT + 5
    assert f"limit={MAX_LIMIT}" in page["next"]


@pytest.mark.parametrize("offset", [HUGE, "-1", "x"])
def test_any_offset_answers_a_page(client: APIClient, offset: str) -> None:
    response = client.get("/api/v1/environments/", {"offset": offset, "limit": "2"})
    assert response.status_code == 200, response.content
    assert len(response.json()["results"]) <= 2


def test_the_schema_says_how_far_a_limit_goes() -> None:
    schema = APIClient().get("/api/schema/?format=json").json()
    [limit] = [p for p in schema["paths"]["/api/v1/environments/"]["get"]["parameters"]
               if p["name"] == "limit"]
    assert f"at most {MAX_LIMIT}" in limit["description"]
