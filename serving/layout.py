"""TF Serving's model layout, `<model_base>/<model_name>/<version>/`, and the one way into it.

TF Serving polls a model directory and loads any child whose name parses as an integer, so a
version must appear complete in one step: publish_version stages the copy in a hidden sibling
directory (same filesystem, and ignored by TF Serving because its name is not a number) and
renames it into place. Concurrent publishers race on the rename; the loser retries with the
next number.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_STAGING_PREFIX = ".staging-"
_MAX_ATTEMPTS = 1000


@dataclass(frozen=True)
class PublishedVersion:
    version: int
    path: Path


def model_path(*, model_base: Path, model_name: str) -> Path:
    """The directory TF Serving's ModelConfig.base_path points at for this model."""
    if not _MODEL_NAME.match(model_name) or model_name in (".", ".."):
        raise ValueError(f"invalid model name {model_name!r}")
    return Path(model_base) / model_name


def _parse_version(name: str) -> int | None:
    # TF Serving accepts zero-padded names such as 00000123 (its own test models use them).
    return int(name) if name.isascii() and name.isdigit() else None


def list_versions(*, model_path: Path) -> list[int]:
    """Version numbers present under a model directory, ascending; [] if it does not exist."""
    try:
        entries = list(os.scandir(model_path))
    except FileNotFoundError:
        return []
    versions = {
        version
        for entry in entries
        if entry.is_dir() and (version := _parse_version(entry.name)) is not None
    }
    return sorted(versions)


def version_path(*, model_path: Path, version: int) -> Path:
    """The directory holding `version`, whether it is named `7` or `00000007`."""
    try:
        entries = list(os.scandir(model_path))
    except FileNotFoundError:
        entries = []
    matches = [e.path for e in entries if e.is_dir() and _parse_version(e.name) == version]
    if len(matches) > 1:
        raise ValueError(f"version {version} is ambiguous under {model_path}: {sorted(matches)}")
    if not matches:
        raise FileNotFoundError(f"no version {version} under {model_path}")
    return Path(matches[0])


def publish_version(*, source: Path, model_base: Path, model_name: str) -> PublishedVersion:
    """Copies a SavedModel directory in as the next version (max existing + 1, or 1)."""
    source = Path(source)
    if not (source / "saved_model.pb").is_file() and not (source / "saved_model.pbtxt").is_file():
        raise ValueError(f"{source} does not contain saved_model.pb")
    directory = model_path(model_base=model_base, model_name=model_name)
    directory.mkdir(parents=True, exist_ok=True)
    staging = directory / f"{_STAGING_PREFIX}{uuid.uuid4().hex}"
    staging.mkdir()  # honours the umask, so servers running as another user can read it
    try:
        shutil.copytree(source, staging, symlinks=False, dirs_exist_ok=True)
        return _rename_into_place(staging, directory)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _rename_into_place(staging: Path, directory: Path) -> PublishedVersion:
    for _ in range(_MAX_ATTEMPTS):
        existing = list_versions(model_path=directory)
        version = (existing[-1] + 1) if existing else 1
        target = directory / str(version)
        try:
            # rename(2) refuses a non-empty target directory, which is what a concurrent
            # publisher's finished version is; a stray file there fails with ENOTDIR.
            os.rename(staging, target)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                continue
            raise
        return PublishedVersion(version=version, path=target)
    raise RuntimeError(f"could not publish a new version under {directory}")
