"""The commit a benchmark report names: the results a run writes don't make the tree 'changed'."""

import shutil
import subprocess
from pathlib import Path

import pytest

from bench import machine


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is needed to name the measured commit")
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "old.md").write_text("old\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    monkeypatch.setattr(machine, "ROOT", tmp_path)
    return tmp_path


def test_results_written_by_the_run_leave_the_commit_clean(repo: Path) -> None:
    (repo / "bench" / "results" / "old.md").write_text("rewritten\n")
    (repo / "bench" / "results" / "new.md").write_text("new\n")
    assert "+" not in machine.git_commit()


def test_a_changed_source_file_is_named(repo: Path) -> None:
    (repo / "code.py").write_text("x = 2\n")
    assert machine.git_commit().endswith("+uncommitted changes")
