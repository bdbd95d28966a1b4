"""Files that hold tokens are 0600 whatever the umask: the helper, a trial's spec and cluster
files, a container's order."""

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from training.isolation.containers import ORDER_FILE, order_write
from training.isolation.private_files import private_write_text
from training.isolation.sandbox import SANDBOX_UID


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def _usual_umask() -> Iterator[None]:
    """The umask most systems start with, under which a plain write is world-readable."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_a_new_file_is_0600_and_an_existing_one_becomes_so(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    private_write_text(path=fresh, text="token")
    assert mode(fresh) == 0o600 and fresh.read_text() == "token"
    old = tmp_path / "old"
    old.write_text("a longer text than the new one")
    old.chmod(0o644)
    private_write_text(path=old, text="new")
    assert mode(old) == 0o600 and old.read_text() == "new"


def test_it_never_writes_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("kept")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(OSError):
        private_write_text(path=tmp_path / "link", text="token")
    assert target.read_text() == "kept"


def test_a_trials_spec_and_cluster_files_are_0600(
    tmp_path: Path, run_trial: Callable[..., Any], make_spec: Callable[..., Any],
    digits_module: str,
) -> None:
    # A workspace's spec holds its API and Jupyter tokens; canceled at once, the files stay.
    spec = make_spec(work_dir=tmp_path / "trial", model=digits_module)
    run_trial(spec=spec, should_cancel=lambda: True, grace_seconds=5.0)
    [attempt] = (tmp_path / "trial.runs" / "attempts").iterdir()
    assert mode(attempt / "spec.json") == 0o600 and mode(attempt / "cluster.json") == 0o600
    assert json.loads((attempt / "spec.json").read_text())["trial_id"] == "trial"


@pytest.mark.skipif(os.geteuid() != 0, reason="the node hands the order to the task's uid")
def test_a_containers_order_is_0600_and_the_tasks_alone(tmp_path: Path) -> None:
    order = {"spec": "{}", "env": {"TFP_TOKEN": "secret"}}
    order_write(channel=tmp_path, order=order)
    written = tmp_path / ORDER_FILE
    assert mode(written) == 0o600 and written.stat().st_uid == SANDBOX_UID
    assert json.loads(written.read_text()) == order
    assert not (tmp_path / f".{ORDER_FILE}").exists()
