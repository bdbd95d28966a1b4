"""Lists answer a page for any whole-number limit and offset, never a 500 (the fuzzer's
`?limit=2164205603286444146688` reached the database as an out-of-range LIMIT), and refuse
anything else with a 400 instead of quietly using the defaults."""

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


@pytest.mark.parametrize("offset", ["0", "7", str(2**62)])
def test_any_whole_offset_answers_a_page(client: APIClient, offset: str) -> None:
    response = client.get("/api/v1/environments/", {"offset": offset, "limit": "2"})
    assert response.status_code == 200, response.content
    assert len(response.json()["results"]) <= 2


@pytest.mark.parametrize(("name", "value"), [
    ("offset", HUGE), ("offset", "-1"), ("offset", "x"), ("offset", "1.5"), ("offset", ""),
    ("limit", "0"), ("limit", "-3"), ("limit", "true"), ("limit", "١٢"), ("limit", ["1", "2"]),
])
def test_a_limit_or_offset_that_is_no_whole_number_is_refused(
    client: APIClient, name: str, value: str | list[str]
) -> None:
    response = client.get("/api/v1/experiments/", {name: value})
    assert response.status_code == 400, response.content
    assert response.json()[name] and response.json()["error"]


def test_an_empty_state_filter_is_refused_not_read_as_every_state(client: APIClient) -> None:
    response = client.get("/api/v1/experiments/", {"state": ""})
    assert response.status_code == 400, response.content
    assert "state" in response.json()


def test_the_schema_says_how_far_a_limit_goes() -> None:
    schema = APIClient().get("/api/schema/?format=json").json()
    [limit] = [p for p in schema["paths"]["/api/v1/environments/"]["get"]["parameters"]
               if p["name"] == "limit"]
    assert f"at most {MAX_LIMIT}" in limit["description"]
