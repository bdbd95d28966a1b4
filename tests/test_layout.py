"""platform/ must never shadow the standard `platform` module that TF, Django and uuid use."""

import os
import platform
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


def test_platform_folder_is_not_a_package() -> None:
    assert (ROOT / "platform").is_dir()
    assert not (ROOT / "platform" / "__init__.py").exists()


def test_pytest_imports_the_standard_platform_module() -> None:
    assert Path(platform.__file__).resolve().parent == STDLIB
    assert platform.system()


def test_from_repo_root_python_still_finds_standard_platform() -> None:
    # The current directory is first on sys.path for `python -c`; the folder must not win.
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import platform, uuid; print(platform.__file__, platform.system())",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(STDLIB) in out


def test_django_process_imports_the_standard_platform_module() -> None:
    code = "import platform, django; print(platform.__file__); print(platform.system())"
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ},
    ).stdout.splitlines()
    assert Path(out[-2]).resolve().parent == STDLIB
    assert out[-1] == platform.system()
