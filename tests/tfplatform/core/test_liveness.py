"""The liveness file (core/liveness.py): the scheduler touches it every loop, and
compose's health check reads its age with the shell alone (a worker node's beats are checked
in tests/tfplatform/monitoring/test_worker_task_metrics.py, on a real worker)."""

import os
import subprocess
import time
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from tests.fixtures_settings import PlatformSettingsOverride

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
BEATING = ("model-loader", "notifier", "scheduler", "worker-cpu", "worker-gpu")


@pytest.mark.django_db
def test_the_scheduler_beats_once_a_loop(
    tmp_path: Path, platform_settings_override: PlatformSettingsOverride,
) -> None:
    alive = tmp_path / "alive"
    platform_settings_override(liveness_file=str(alive))
    call_command("scheduler", "--once", stdout=StringIO())
    assert alive.exists() and time.time() - alive.stat().st_mtime < 60


def health_check_exit(*, service: str, alive: Path) -> int:
    """The service's compose health check, run by the shell as the engine runs CMD-SHELL."""
    configured = COMPOSE["x-app"]["environment"]["PLATFORM_LIVENESS_FILE"]
    kind, command = COMPOSE["services"][service]["healthcheck"]["test"]
    assert kind == "CMD-SHELL" and configured in command
    command = command.replace("$$", "$").replace(configured, str(alive))
    return subprocess.run(["sh", "-c", command], check=False, capture_output=True).returncode


@pytest.mark.parametrize("service", BEATING)
def test_compose_calls_a_service_healthy_while_its_file_is_fresh(
    tmp_path: Path, service: str,
) -> None:
    alive = tmp_path / "alive"
    assert health_check_exit(service=service, alive=alive) != 0  # not started, or stopped
    alive.touch()
    assert health_check_exit(service=service, alive=alive) == 0
    stale = time.time() - 91
    os.utime(alive, (stale, stale))
    assert health_check_exit(service=service, alive=alive) != 0
