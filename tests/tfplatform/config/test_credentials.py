"""Service passwords apart from their URLs: DATABASE_PASSWORD and REDIS_PASSWORD, or their
*_FILE forms as compose hands them over (docker-compose.yml's secrets)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tfplatform.config.credentials import redis_url_with_password, url_with_password

ROOT = Path(__file__).resolve().parents[3]
SHOW = ("import django; django.setup(); from django.conf import settings; "
        "d = settings.DATABASES['default']; print(d['USER'], d['PASSWORD'], d['HOST']); "
        "print(settings.CELERY_BROKER_URL); print(settings.CACHES['default']['LOCATION']); "
        "from tfplatform.config.celery import app; "
        "print(app.connection_for_read().as_uri(include_password=True)); "
        "print(app.connection_for_write().as_uri(include_password=True))")


def _settings_with(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DATABASE_", "REDIS_", "CELERY_BROKER_URL", "CACHE_URL"))}
    env |= {"PLATFORM_VAR_DIR": str(tmp_path / "var"), "PYTHONPATH": f"{ROOT / 'platform'}:{ROOT}",
            "DJANGO_SETTINGS_MODULE": "tfplatform.config.settings", **variables}
    return subprocess.run([sys.executable, "-c", SHOW], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_passwords_from_secret_files_join_the_urls_compose_gives(tmp_path: Path) -> None:
    (tmp_path / "postgres_password").write_text("pg:pass/word@1\n")
    (tmp_path / "redis_password").write_text("re dis#2\n")
    result = _settings_with(
        tmp_path, DATABASE_URL="postgres://platform@postgres:5432/platform",
        DATABASE_PASSWORD_FILE=str(tmp_path / "postgres_password"),
        CELERY_BROKER_URL="redis://redis:6379/0", CACHE_URL="rediscache://redis:6379/1",
        REDIS_PASSWORD_FILE=str(tmp_path / "redis_password"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [
        "platform pg:pass/word@1 postgres",
        "redis://:re%20dis%232@redis:6379/0",
        "redis://:re%20dis%232@redis:6379/1",
        # What Celery connects with, though CELERY_BROKER_URL itself names no password.
        "redis://:re%20dis%232@redis:6379/0",
        "redis://:re%20dis%232@redis:6379/0",
    ]


def test_the_clients_read_the_password_back_as_it_was_given() -> None:
    from kombu.utils.url import url_to_parts
    from redis.connection import parse_url

    url = redis_url_with_password(url="redis://redis:6379/0", password="a:b@c/d e%",
                                  name="CELERY_BROKER_URL")
    assert url_to_parts(url).password == "a:b@c/d e%"
    assert parse_url(url)["password"] == "a:b@c/d e%"


def test_a_url_that_already_holds_a_password_is_refused_not_overridden() -> None:
    with pytest.raises(ImproperlyConfigured, match="give the password one way"):
        url_with_password(url="postgres://platform:old@db/platform", password="new",
                          name="DATABASE_URL", given_as="DATABASE_PASSWORD")


def test_a_database_password_for_sqlite_is_a_mistake_said_at_start(tmp_path: Path) -> None:
    result = _settings_with(tmp_path, DATABASE_PASSWORD="secret")
    assert result.returncode != 0
    assert "DATABASE_PASSWORD is set, but DATABASE_URL (sqlite://) names no server" \
        in result.stderr


def test_without_passwords_or_for_other_brokers_the_urls_stay_as_given() -> None:
    assert url_with_password(url="postgres://u@db/p", password="", name="DATABASE_URL",
                             given_as="DATABASE_PASSWORD") == "postgres://u@db/p"
    for url in ("filesystem://", "locmemcache://", "amqp://guest@rabbit//"):
        assert redis_url_with_password(url=url, password="x", name="CELERY_BROKER_URL") == url
