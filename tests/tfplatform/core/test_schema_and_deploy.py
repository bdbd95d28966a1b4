import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tests.factories import UserFactory

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.django_db
def test_openapi_schema_lists_the_v1_api() -> None:
    response = APIClient().get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    for path in (
        "/api/v1/auth/token/",
        "/api/v1/experiments/",
        "/api/v1/experiments/{experiment_id}/",
        "/api/v1/experiments/{experiment_id}/metrics/",
        "/api/v1/experiments/{experiment_id}/logs/",
        "/api/v1/experiments/{experiment_id}/cancel/",
        "/api/v1/environments/",
        "/api/v1/nodes/",
        "/api/v1/models/",
    ):
        assert path in schema["paths"], path
    create = schema["components"]["schemas"]["ExperimentCreateRequest"]
    assert {"name", "model", "dataset"} <= set(create["required"])


@pytest.mark.django_db
def test_api_docs_page_uses_no_cdn() -> None:
    client = APIClient()
    client.force_login(UserFactory())
    html = client.get("/api/docs/").content.decode()
    assert "swagger-ui" in html
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources and all(source.startswith("/") for source in sources), sources


def test_production_settings_pass_deploy_check() -> None:
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"},
        "DJANGO_DEBUG": "false",
        "DJANGO_SECURE": "true",
        "DJANGO_STATIC_MANIFEST": "true",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
        "DJANGO_ALLOWED_HOSTS": "platform.example.org",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.django_db
def test_unknown_api_path_is_json_404() -> None:
    client = APIClient()
    response = client.get("/api/v1/nothing-here/")
    assert response.status_code == 404
    assert response.json() == {"error": "Not found.", "code": "not_found"}
