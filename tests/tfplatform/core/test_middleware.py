"""Text the database cannot hold never reaches it: a NUL character in a URL, a name looked up or
a JSON object is a 400, on PostgreSQL as on SQLite (the API fuzzer found the first two as 500s)."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def client() -> APIClient:
    made = APIClient()
    made.force_authenticate(UserFactory())
    return made


@pytest.mark.parametrize("path", [
    "/api/v1/models/a%00b/", "/api/v1/experiments/?owner=a%00b", "/models/a%00b/",
])
def test_a_url_with_a_nul_character_is_a_400(client: APIClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 400 and "NUL" in answer.json()["error"]


def test_predicting_on_a_name_with_a_nul_character_is_a_400(client: APIClient) -> None:
    answer = client.post("/api/v1/models/a%00b:predict", data="{}",
                         content_type="application/json")
    assert answer.status_code == 400


@pytest.mark.parametrize(("field", "value"), [
    ("environment", "tensorflow\x00"), ("environment", "x" * 500),
    ("hyperparameters", {"epochs": 1, "note\x00": 1}),
    ("hyperparameters", {"optimizer": ["adam\x00"]}),
])
def test_a_submitted_value_with_a_nul_character_is_a_field_error(
    client: APIClient, field: str, value: Any
) -> None:
    body = {"name": "n", "model": "mlp", "dataset": "digits", field: value}
    answer = client.post("/api/v1/experiments/", body, format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()[field]
