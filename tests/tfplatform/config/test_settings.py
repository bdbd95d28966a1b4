"""The suite keeps its files and broker apart from a `make run` in the same checkout: a platform
worker running there must not take the suite's tasks, nor the suite's workers take its own."""

import os
import stat
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[3]


def test_the_suite_has_a_var_directory_of_its_own() -> None:
    ours, make_runs = settings.VAR_DIR, settings.ROOT_DIR / "var"
    # Under xdist each worker has a folder of its own below it (pyproject's pytest env).
    assert ours == make_runs / "test" / os.environ.get("PYTEST_XDIST_WORKER", "")
    for path in (settings.PLATFORM.model_base_path, settings.PLATFORM.work_dir):
        assert path.is_relative_to(ours)
    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        folders = settings.CELERY_BROKER_TRANSPORT_OPTIONS
        assert folders["data_folder_in"] == str(ours / "broker")


def test_the_secret_key_and_the_database_file_are_made_private(tmp_path: Path) -> None:
    """Created 0600, whatever the umask: nobody else on the host reads sessions' key or rows."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "DJANGO_SECRET_KEY")}
    env |= {"PLATFORM_VAR_DIR": str(tmp_path), "PYTHONPATH": f"{ROOT / 'platform'}:{ROOT}"}
    subprocess.run(
        ["sh", "-c", f"umask 022 && exec {sys.executable} manage.py migrate --noinput"],
        cwd=ROOT, env=env, check=True, capture_output=True, timeout=300,
    )
    for name in ("secret_key", "db.sqlite3"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    assert len((tmp_path / "secret_key").read_text().strip()) > 40
    assert not list(tmp_path.glob(".secret_key.*"))  # no staged copy left behind
