from pathlib import Path

import pytest
from django.core.management import call_command

from tfplatform.accounts.models import User

pytestmark = pytest.mark.django_db


def test_bootstrap_creates_admin_once_with_generated_password(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PLATFORM_ADMIN_PASSWORD", raising=False)
    call_command("platform_bootstrap")
    printed = capsys.readouterr().out
    password = printed.rsplit("password: ", 1)[1].strip()
    admin = User.objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(password)

    call_command("platform_bootstrap")
    again = capsys.readouterr().out
    assert "already exists" in again and password not in again
    assert User.objects.filter(is_superuser=True).count() == 1


def test_bootstrap_uses_configured_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_ADMIN_PASSWORD", "s3cret-from-env-42")
    call_command("platform_bootstrap")
    assert User.objects.get(username="admin").check_password("s3cret-from-env-42")


def test_bootstrap_reads_the_password_from_the_file_its_file_variable_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = tmp_path / "admin_password"
    secret.write_text("s3cret-from-a-file-42\n")
    monkeypatch.delenv("PLATFORM_ADMIN_PASSWORD", raising=False)
    monkeypatch.setenv("PLATFORM_ADMIN_PASSWORD_FILE", str(secret))
    call_command("platform_bootstrap")
    assert User.objects.get(username="admin").check_password("s3cret-from-a-file-42")
