import pytest
from rest_framework.test import APIClient

from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db


def test_token_login_and_use() -> None:
    user = UserFactory()
    client = APIClient()
    response = client.post(
        "/api/v1/auth/token/", {"username": user.username, "password": PASSWORD}, format="json"
    )
    assert response.status_code == 200
    token = response.json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/experiments/").status_code == 200


def test_wrong_password_is_400_with_error() -> None:
    user = UserFactory()
    response = APIClient().post(
        "/api/v1/auth/token/", {"username": user.username, "password": "x"}, format="json"
    )
    assert response.status_code == 400
    assert "error" in response.json()
    assert "token" not in response.json()


def test_bad_token_is_401() -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    response = client.get("/api/v1/experiments/")
    assert response.status_code == 401
    assert response.json() == {
        "error": "Invalid, expired or revoked token.", "code": "authentication_failed"}


def test_login_attempts_are_rate_limited() -> None:
    client = APIClient()
    codes = [
        client.post(
            "/api/v1/auth/token/", {"username": "nobody", "password": "guess"}, format="json"
        ).status_code
        for _ in range(25)
    ]
    assert codes[0] == 400
    assert codes[-1] == 429
    assert "error" in client.post("/api/v1/auth/token/", {}, format="json").json()
