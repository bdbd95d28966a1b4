"""serving/ runs where Django is not installed (the tensorflow/serving-like image, a bare host):
importing every one of its modules, as `python -m serving` does, loads neither Django nor the
platform. import-linter checks the import statements; this checks what actually gets loaded."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, pkgutil, sys
import serving
names = sorted(m.name for m in pkgutil.iter_modules(serving.__path__, "serving."))
for name in names:
    if name != "serving.__main__":
        importlib.import_module(name)
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"django", "tfplatform", "celery"})
print(len(names), ",".join(loaded) or "-")
"""


def test_importing_all_of_serving_loads_no_django_and_no_platform() -> None:
    answer = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert answer.returncode == 0, answer.stderr[-2000:]
    count, loaded = answer.stdout.split()
    assert int(count) >= 20  # every module was imported, not an empty package
    assert loaded == "-"


def test_python_dash_m_serving_is_the_model_server_command_line() -> None:
    answer = subprocess.run(
        [sys.executable, "-m", "serving", "--help"], cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )
    assert answer.returncode == 0, answer.stderr[-2000:]
    assert "--model_base_path" in answer.stdout and "--rest_api_port" in answer.stdout
