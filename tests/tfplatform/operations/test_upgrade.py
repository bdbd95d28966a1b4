"""An upgrade from the last release's schema, rows in it: `migrate` keeps every row and its
relations, including those whose models moved (the allocation's holder became a generic
reference; the workspace moved to an app of its own, table and content type kept)."""

import json
import sys
from pathlib import Path

import pytest

from tests import live
from tfplatform.operations.releases import RELEASES, release_of

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def test_the_last_release_upgrades_with_its_rows_kept(postgres: live.Postgres,
                                                      tmp_path: Path) -> None:
    last = list(RELEASES)[-1]
    env = live.platform_env(database_url=postgres.url, var_dir=tmp_path / "var",
                            DJANGO_SETTINGS_MODULE="tfplatform.config.settings",
                            PYTHONPATH=f"{ROOT / 'platform'}:{ROOT}")
    import subprocess

    run = subprocess.run([sys.executable, str(Path(__file__).with_name("upgrade_run.py")), last],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(run.stdout.splitlines()[-1])
    assert rows == {
        "allocation_holder": ["trial", True],
        "trial_allocations": ["A100"],
        "workspace": ["ada", "lab", "vision"],
        "workspace_content_type": ["workspaces", True],  # moved, not made anew
        "experiments": ["lab", "resnet"],
        "metrics": [["val_accuracy", 0.9]],
        "served": [["digits", [1], {"stable": 1}]],
    }


def test_a_release_is_known_by_its_schema() -> None:
    schema = RELEASES["0.1.0"]
    applied = {app: [f"0000_{app}", name] for app, name in schema.items()}
    assert release_of(migrations=applied | {"auth": ["0012_x"]}) == "0.1.0"
    assert release_of(migrations=applied | {"workspaces": ["0001_initial"]}) is None
