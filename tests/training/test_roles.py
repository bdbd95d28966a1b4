"""training/ by role: the modules other processes start by name still start, and the platform's
processes never load what runs inside a task."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = ("training", "serving", "tfplatform", "confinement")
# `"-m", "pkg.module"` in an argv list, or `python -m pkg.module` in a command line.
ENTRY = re.compile(r'"-m",\s*"([a-z_][a-z0-9_.]*)"|python3? -m ([a-z_][a-z0-9_.]*)')


def _sources() -> list[Path]:
    files = [p for folder in ("training", "serving", "platform/tfplatform", "confinement")
             for p in (ROOT / folder).rglob("*.py") if "migrations" not in p.parts]
    extra = ["Makefile", "Procfile", "Dockerfile", "docker-compose.yml",
             "docker-compose.containers.yml"]
    return files + [ROOT / name for name in extra if (ROOT / name).exists()]


def entry_points() -> list[str]:
    found = set()
    for path in _sources():
        for match in ENTRY.finditer(path.read_text(errors="replace")):
            module = match.group(1) or match.group(2)
            if module.split(".")[0] in FIRST_PARTY:
                found.add(module)
    return sorted(found)


def _minimal_env() -> dict[str, str]:
    # What a container command or a node's launcher gives: the repository on the path, no more.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": f"{ROOT}:{ROOT / 'platform'}", "TF_CPP_MIN_LOG_LEVEL": "3",
            "DJANGO_SETTINGS_MODULE": "tfplatform.config.settings"}


def test_the_entry_points_are_found() -> None:
    # The scan itself must see the ones the node and the model registry start.
    assert {"training.trial.host", "training.trial.holder", "training.trial.forkserver",
            "training.trial.worker", "serving.graph_check"} <= set(
        entry_points())


@pytest.mark.parametrize("module", entry_points())
def test_every_module_started_by_name_starts(module: str) -> None:
    result = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT,
                            env=_minimal_env(), capture_output=True, text=True, timeout=120,
                            check=False)
    output = result.stdout + result.stderr
    assert "No module named" not in output, output[-2000:]
    # argparse answers --help with 0; a hand-rolled usage line may exit 2 but still names itself.
    assert result.returncode == 0 or "usage" in output.lower(), output[-2000:]


def test_the_platform_never_loads_the_trial_side() -> None:
    code = (
        "import sys, django; django.setup(); import tfplatform.config.urls; "
        "from tfplatform.experiments.management.commands import worker; "
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'tf_keras') "
        "or m.startswith(('training.trial', 'training.data'))]; print(sorted(loaded)); "
        # Nor scikit-learn (a grid search's, imported when one is asked for): every web
        # process, node and scheduler would pay over a second of CPU to start.
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sklearn', 'scipy'}))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                            env={**os.environ, **_minimal_env()}, capture_output=True,
                            text=True, timeout=120, check=True)
    assert result.stdout.strip().splitlines()[-2:] == ["[]", "[]"]
