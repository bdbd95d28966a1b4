"""The mail server notification emails go through: EMAIL_URL, its password apart (as compose
hands secrets over), and the console when nothing is set."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SHOW = ("import django; django.setup(); from django.conf import settings as s; "
        "print(s.EMAIL_BACKEND, s.EMAIL_HOST, s.EMAIL_PORT, s.EMAIL_HOST_USER, "
        "s.EMAIL_HOST_PASSWORD, s.EMAIL_USE_TLS, s.EMAIL_USE_SSL, s.EMAIL_TIMEOUT)")


def _settings_with(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("EMAIL_")}
    env |= {"PLATFORM_VAR_DIR": str(tmp_path / "var"), "PYTHONPATH": f"{ROOT / 'platform'}:{ROOT}",
            "DJANGO_SETTINGS_MODULE": "tfplatform.config.settings", **variables}
    return subprocess.run([sys.executable, "-c", SHOW], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_mail_server_and_its_password_from_a_secret_file(tmp_path: Path) -> None:
    (tmp_path / "mail_password").write_text("p@ss word\n")
    result = _settings_with(tmp_path, EMAIL_URL="smtp+tls://platform@mail.example.com",
                            EMAIL_HOST_PASSWORD_FILE=str(tmp_path / "mail_password"),
                            EMAIL_TIMEOUT="5")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [
        "django.core.mail.backends.smtp.EmailBackend", "mail.example.com", "587", "platform",
        "p@ss", "word", "True", "False", "5"]


def test_nothing_set_prints_them_and_two_passwords_stop_the_start(tmp_path: Path) -> None:
    result = _settings_with(tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[0] == "django.core.mail.backends.console.EmailBackend"
    refused = _settings_with(tmp_path, EMAIL_URL="smtp://u:one@mail.example.com:25",
                             EMAIL_HOST_PASSWORD="two")
    assert refused.returncode != 0 and "give the password one way" in refused.stderr
