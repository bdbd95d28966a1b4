"""Environments: pinned packages only, a venv built once per node layered on the node's runtime.

The builds install a real wheel from the package index: pyjokes 0.8.3 (pure Python, no
dependencies, not in the platform's own requirements).
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from training.errors import EnvironmentBuildFailed, InvalidInput
from training.isolation.runtime import TaskPython
from training.isolation.runtime_factory import runtime_for
from training.isolation.sandbox import Exposure, sandbox_command
from training.isolation.seccomp import seccomp_memfd
from training.isolation.venvs import (
    LOCK_FILE,
    READY_MARKER,
    environment_key,
    environment_packages_validate,
    environment_prepare,
    log_tail,
)

PACKAGE = "pyjokes==0.8.3"
# Imports the environment's package and one of the node's, and says where each came from.
PROBE = (
    "import json, sys, numpy, pyjokes; "
    "print(json.dumps({'pyjokes': pyjokes.__file__, 'numpy': numpy.__file__, 'path': sys.path}))"
)


def test_packages_are_normalized_and_sorted() -> None:
    assert environment_packages_validate(
        packages=["PyJokes == 0.8.3", "Requests[SOCKS]==2.32.0", "six==1.16"]
    ) == ["pyjokes==0.8.3", "requests[socks]==2.32.0", "six==1.16"]
    assert environment_packages_validate(packages=[]) == []


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("pyjokes", "exact version with =="),
        ("pyjokes>=0.8", "exact version with =="),
        ("pyjokes==0.8.3,<1", "exact version with =="),
        ("pyjokes===0.8.3", "exact version with =="),
        ("pyjokes==0.8.*", "not a wildcard"),
        ("pyjokes @ https://example.org/pyjokes-0.8.3-py3-none-any.whl", "URL or path"),
        ("pyjokes @ file:///tmp/pyjokes-0.8.3-py3-none-any.whl", "URL or path"),
        ("./pyjokes-0.8.3-py3-none-any.whl", "not a pinned requirement"),
        ("/tmp/pyjokes.whl", "not a pinned requirement"),
        ("--index-url=https://example.org/simple", "not a pinned requirement"),
        ("-e git+https://example.org/pyjokes.git", "not a pinned requirement"),
        ("pyjokes==0.8.3; python_version > '3'", "environment marker"),
        ("", "not a pinned requirement"),
    ],
)
def test_anything_but_a_pinned_index_package_is_refused(entry: str, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        environment_packages_validate(packages=[entry])


def test_a_package_twice_or_not_a_list_is_refused() -> None:
    with pytest.raises(InvalidInput, match="listed twice"):
        environment_packages_validate(packages=["pyjokes==0.8.3", "PyJokes==0.8.2"])
    with pytest.raises(InvalidInput, match="must be a list"):
        environment_packages_validate(packages="pyjokes==0.8.3")
    with pytest.raises(InvalidInput, match="must be a list"):
        environment_packages_validate(packages=[{"name": "pyjokes"}])


def test_the_key_is_the_content_not_the_spelling() -> None:
    key = environment_key(packages=["six==1.16", "pyjokes==0.8.3"], base="node-a")
    assert key == environment_key(packages=["PyJokes==0.8.3", "Six == 1.16"], base="node-a")
    assert key != environment_key(packages=["six==1.16", "pyjokes==0.8.2"], base="node-a")
    # Another runtime (a TF upgrade, another prefix) needs its own venv.
    assert key != environment_key(packages=["six==1.16", "pyjokes==0.8.3"], base="node-b")


def test_no_packages_is_the_nodes_own_python(tmp_path: Path) -> None:
    python = environment_prepare(packages=[], root=tmp_path / "envs", log_path=tmp_path / "log")
    assert python == TaskPython()
    assert not (tmp_path / "envs").exists() and not (tmp_path / "log").exists()


@pytest.mark.slow
def test_a_venv_is_built_once_and_imports_its_packages_and_the_nodes(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    first = environment_prepare(packages=[PACKAGE], root=root, log_path=tmp_path / "warm-up.log")
    # The closure was installed from the lock its resolution wrote, every wheel by hash.
    venv = Path(first.paths[0])
    lock = (venv / LOCK_FILE).read_text().splitlines()
    assert lock and all(re.fullmatch(r"[\w.-]+==[\w.]+ --hash=sha256:[0-9a-f]{64}", line)
                        for line in lock), lock
    assert any(line.startswith(f"{PACKAGE} ") for line in lock), lock
    assert "--require-hashes" in (tmp_path / "warm-up.log").read_text()
    # The remains of a build cut short (no marker) are built again, not trusted.
    (venv / READY_MARKER).unlink()
    (venv / "half-made").touch()

    results: dict[str, TaskPython] = {}

    def prepare(name: str) -> None:
        results[name] = environment_prepare(
            packages=[PACKAGE], root=root, log_path=tmp_path / f"{name}.log"
        )

    threads = [threading.Thread(target=prepare, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    python = results["a"]
    assert results["b"] == python == first
    # Two trials starting at once on one node: one of them built it, the other waited.
    assert sorted(p.name for p in tmp_path.glob("[ab].log")) in (["a.log"], ["b.log"])
    assert not (venv / "half-made").exists()
    built_at = (venv / READY_MARKER).stat().st_mtime_ns

    again = environment_prepare(packages=["PyJokes==0.8.3"], root=root, log_path=tmp_path / "c.log")
    assert again == python and not (tmp_path / "c.log").exists()
    assert (venv / READY_MARKER).stat().st_mtime_ns == built_at

    assert python.key == venv.name and venv.parent == root.resolve()
    assert python.executable == str(venv / "bin" / "python")
    probe = json.loads(
        subprocess.run([python.executable, "-c", PROBE], capture_output=True, text=True,
                       check=True).stdout
    )
    assert Path(probe["pyjokes"]).is_relative_to(venv)
    node_sites = [p for p in site.getsitepackages() if Path(p).is_dir()]
    assert Path(probe["numpy"]).parent.parent == Path(node_sites[0])
    # The environment's own packages come before the node's.
    own = probe["path"].index(str(venv / "lib" / f"python{sys.version_info[0]}."
                                        f"{sys.version_info[1]}" / "site-packages"))
    assert own < probe["path"].index(node_sites[0])

    # The node's own interpreter does not have it: the environment is what adds it.
    without = subprocess.run([sys.executable, "-c", "import pyjokes"], capture_output=True,
                             text=True, check=False)
    assert without.returncode == 1
    assert "No module named 'pyjokes'" in without.stderr


@pytest.mark.slow
def test_the_venv_works_inside_the_trial_sandbox(tmp_path: Path) -> None:
    runtime_for(name="sandbox")  # fails clearly where bwrap or Landlock is missing
    python = environment_prepare(packages=[PACKAGE], root=tmp_path / "envs",
                                 log_path=tmp_path / "build.log")
    seccomp = seccomp_memfd()
    argv = [*sandbox_command(python=python, exposure=Exposure(), seccomp_fd=seccomp),
            python.executable, "-c", PROBE]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, env={},
                            pass_fds=(seccomp,))
    os.close(seccomp)
    assert result.returncode == 0, result.stderr
    assert Path(json.loads(result.stdout)["pyjokes"]).is_relative_to(python.paths[0])


@pytest.mark.slow
def test_a_failed_build_raises_with_pips_reason_and_leaves_nothing(tmp_path: Path) -> None:
    root, log = tmp_path / "envs", tmp_path / "build.log"
    with pytest.raises(EnvironmentBuildFailed) as failed:
        environment_prepare(packages=["pyjokes==99.0.0"], root=root, log_path=log)
    assert "No matching distribution found for pyjokes==99.0.0" in failed.value.log_tail
    assert failed.value.log_tail in str(failed.value)
    assert failed.value.log_tail == log_tail(path=log, max_bytes=2000)
    assert [p.suffix for p in root.iterdir()] == [".lock"]  # no venv, complete or not


def test_the_log_tail_starts_at_a_line(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("".join(f"line {n}\n" for n in range(1000)))
    tail = log_tail(path=log, max_bytes=30)
    assert tail.startswith("line ") and tail.endswith("line 999")
    assert len(tail) <= 30
    assert log_tail(path=tmp_path / "missing.log", max_bytes=30) == ""
