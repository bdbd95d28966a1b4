"""A registered dataset's folder is checked again, links not followed, as a trial mounts it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from training.errors import InvalidInput
from training.isolation.dataset_mounts import mount_check, mounts_open
from training.isolation.runtime import TaskPython
from training.isolation.sandbox import Exposure, sandbox_command, trial_exposure, trial_paths
from training.isolation.seccomp import seccomp_memfd
from training.shard_schema import ShardedSource
from training.spec import TrialEvent, TrialSpec
from training.supervisor.supervise import trial_supervise


def _source(folder: Path) -> ShardedSource:
    return ShardedSource(
        name="team-data", format="parquet", train=str(folder / "train"),
        validation=str(folder / "validation"), features={"x": {"dtype": "float32", "shape": []}},
        label="label", label_spec={"dtype": "int64", "shape": []}, train_examples=4,
        validation_examples=2, num_classes=2, size_bytes=1,
    )


@pytest.fixture
def teams(tmp_path: Path) -> tuple[Path, Path]:
    """A dataset root with team a's dataset and team b's private folder."""
    root = tmp_path / "root"
    for split in ("train", "validation"):
        (root / "a" / "ds" / split).mkdir(parents=True)
    (root / "b" / "secret").mkdir(parents=True)
    return root, root / "a" / "ds"


def _spec(tmp_path: Path, root: Path, dataset: Path) -> TrialSpec:
    return TrialSpec(trial_id="t1", model="mlp", dataset="team-data",
                     work_dir=str(tmp_path / "work"), dataset_source=_source(dataset).to_dict(),
                     dataset_roots=[str(root)])


def test_a_real_folder_below_a_root_is_mounted_and_a_linked_root_is_allowed(
    tmp_path: Path, teams: tuple[Path, Path]
) -> None:
    root, dataset = teams
    assert mount_check(path=str(dataset / "train"), roots=[str(root)]) == str(dataset / "train")
    alias = tmp_path / "alias"  # the operator's root may itself be a link
    alias.symlink_to(root)
    assert mount_check(path=str(alias / "a" / "ds"), roots=[str(alias)]) == str(dataset)
    assert trial_paths(spec=_spec(tmp_path, root, dataset))[1] == (
        str(dataset / "train"), str(dataset / "validation"))


@pytest.mark.parametrize("swapped", ["ds", "train"])
def test_a_link_swapped_in_after_the_checks_refuses_the_mount_and_the_trial(
    swapped: str, tmp_path: Path, teams: tuple[Path, Path]
) -> None:
    root, dataset = teams
    spec = _spec(tmp_path, root, dataset)  # built while the folders were real
    target = dataset if swapped == "ds" else dataset / "train"
    target.rename(tmp_path / "moved")
    target.symlink_to(root / "b" / "secret")  # still "inside the root", once resolved
    with pytest.raises(InvalidInput, match=re.escape(f"{target} is a symbolic link")):
        trial_paths(spec=spec)
    events: list[TrialEvent] = []
    outcome = trial_supervise(spec=spec, on_events=events.extend, should_cancel=lambda: False,
                              run_dir=str(tmp_path / "runs"))
    assert outcome.status == "failed" and not outcome.retryable
    assert "dataset 'team-data' cannot be mounted" in outcome.exit_reason
    assert "symbolic link" in outcome.exit_reason
    assert events == []  # nothing launched, nothing mounted


def test_outside_the_roots_a_whole_root_or_no_roots_are_refused(
    tmp_path: Path, teams: tuple[Path, Path]
) -> None:
    root, dataset = teams
    for path, roots, reason in [
        (str(tmp_path / "elsewhere"), [str(root)], "not inside the dataset roots"),
        (str(dataset), [], "none configured"),
        (str(root), [str(root)], "a whole dataset root"),
        (f"{root}/a/../b/secret", [str(root)], "without '..'"),
        (str(dataset / "missing"), [str(root)], "does not exist"),
        (str(root / "a" / "ds" / "train" / "x"), [str(root)], "does not exist"),
    ]:
        with pytest.raises(InvalidInput, match=reason):
            mount_check(path=path, roots=roots)
    (dataset / "train" / "part-0").write_bytes(b"")
    with pytest.raises(InvalidInput, match="does not exist"):  # a file is no folder on the way
        mount_check(path=str(dataset / "train" / "part-0" / "x"), roots=[str(root)])
    os.symlink(root / "b", root / "c")
    with pytest.raises(InvalidInput, match="symbolic link"):
        mount_check(path=str(root / "c" / "secret"), roots=[str(root)])


def _listed_in_sandbox(*, folder: Path, pins: dict[str, int]) -> list[str]:
    seccomp = seccomp_memfd()
    try:
        argv = [*sandbox_command(python=TaskPython(), exposure=Exposure(read=(str(folder),)),
                                 seccomp_fd=seccomp, pinned_fds=pins),
                sys.executable, "-c",
                f"import json, os; print(json.dumps(sorted(os.listdir({str(folder)!r}))))"]
        result = subprocess.run(argv, capture_output=True, text=True, check=False, env={},
                                pass_fds=(seccomp, *pins.values()), timeout=60)
    finally:
        os.close(seccomp)
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout))


def test_the_sandbox_binds_the_folder_that_was_checked_not_a_link_swapped_in_after(
    tmp_path: Path, teams: tuple[Path, Path]
) -> None:
    root, dataset = teams
    (dataset / "train" / "part-0").write_bytes(b"")
    spec = _spec(tmp_path, root, dataset)
    assert trial_exposure(spec=spec).pinned == (str(dataset / "train"),
                                                str(dataset / "validation"))
    pins = mounts_open(paths=[str(dataset / "train")], roots=spec.dataset_roots)
    try:
        # Swapped between the check and the bind: what is mounted is still what was checked.
        dataset.rename(tmp_path / "moved")
        dataset.symlink_to(root / "b" / "secret")
        (root / "b" / "secret" / "train").mkdir()
        (root / "b" / "secret" / "train" / "b-only").write_bytes(b"")
        assert _listed_in_sandbox(folder=dataset / "train", pins=pins) == ["part-0"]
        # By name, the bind would follow the link into team b's folder.
        assert _listed_in_sandbox(folder=dataset / "train", pins={}) == ["b-only"]
    finally:
        for fd in pins.values():
            os.close(fd)
    with pytest.raises(InvalidInput, match="symbolic link"):
        mounts_open(paths=[str(dataset / "train")], roots=spec.dataset_roots)
