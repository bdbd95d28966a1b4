"""Any variable may be given as NAME_FILE, a file holding its value (Docker and Kubernetes
secrets): the database URL and the secret key never appear in a process' environment."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tfplatform.core.environment import platform_env

ROOT = Path(__file__).resolve().parents[3]
SHOW = ("import django; django.setup(); from django.conf import settings; "
        "print(settings.SECRET_KEY); print(settings.DATABASES['default']['NAME']); "
        "print(settings.PLATFORM.gang_subnet)")


def _settings_with(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "DJANGO_SECRET_KEY", "PLATFORM_GANG_SUBNET")}
    env |= {"PLATFORM_VAR_DIR": str(tmp_path / "var"), "PYTHONPATH": f"{ROOT / 'platform'}:{ROOT}",
            "DJANGO_SETTINGS_MODULE": "tfplatform.config.settings", **variables}
    return subprocess.run([sys.executable, "-c", SHOW], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_secrets_and_settings_are_read_from_the_files_their_file_variables_name(
    tmp_path: Path,
) -> None:
    key, url, subnet = tmp_path / "key", tmp_path / "url", tmp_path / "subnet"
    key.write_text("a-secret-key-from-a-file\n")  # as `echo ... > file` writes it
    url.write_text("postgres://platform@db.internal:5432/platform_prod\n")
    subnet.write_text("10.99.0.0/16")
    result = _settings_with(tmp_path, DJANGO_SECRET_KEY_FILE=str(key), DATABASE_URL_FILE=str(url),
                            PLATFORM_GANG_SUBNET_FILE=str(subnet))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["a-secret-key-from-a-file", "platform_prod",
                                          "10.99.0.0/16"]


def test_a_file_variable_naming_no_readable_file_stops_the_start_saying_which(
    tmp_path: Path,
) -> None:
    result = _settings_with(tmp_path, DJANGO_SECRET_KEY_FILE=str(tmp_path / "missing"))
    assert result.returncode != 0
    assert f"DJANGO_SECRET_KEY_FILE names {tmp_path / 'missing'}, which cannot be read" \
        in result.stderr


def test_the_plain_variable_still_works_and_a_file_variable_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLATFORM_EXAMPLE", "plain")
    assert platform_env().str("PLATFORM_EXAMPLE") == "plain"
    (tmp_path / "example").write_text("from the file\n")
    monkeypatch.setenv("PLATFORM_EXAMPLE_FILE", str(tmp_path / "example"))
    assert platform_env().str("PLATFORM_EXAMPLE") == "from the file"
    monkeypatch.setenv("PLATFORM_EXAMPLE_FILE", str(tmp_path / "gone"))
    with pytest.raises(ImproperlyConfigured):
        platform_env().str("PLATFORM_EXAMPLE")
