"""TF Serving's model layout, `<model_base>/<model_name>/<version>/`, and the one way into it.

TF Serving polls a model directory and loads any child whose name parses as an integer, so a
version must appear complete in one step: publish_version stages the copy in a hidden sibling
directory (same filesystem, and ignored by TF Serving because its name is not a number) and
renames it into place. Concurrent publishers race on the rename; the loser retries with the
next number.

A source written by user code (a trial's export) is published with `untrusted=True`: the tree is
walked through directory descriptors with nothing followed, so a symbolic link anywhere in it
(or in place of it) or anything but a directory or a regular file is refused, never read.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# The model server's own files beside the models (its config, monitoring config and their
# staging copies): a model of that name would take the file's place or write over it.
SERVER_FILES = frozenset({"models.config", "models.tmp", "monitoring.config", "monitoring.tmp"})
_STAGING_PREFIX = ".staging-"
_MAX_ATTEMPTS = 1000
# Deeper than any SavedModel; keeps a hostile tree from exhausting recursion or descriptors.
_MAX_DEPTH = 32
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a fifo swapped in after the check must not hang the open; fstat refuses it.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_COPY_CHUNK = 1024 * 1024


class UnsafeSource(ValueError):
    """A source tree that is or holds a symlink, or a fifo, socket or device."""


@dataclass(frozen=True)
class PublishedVersion:
    version: int
    path: Path


def model_path(*, model_base: Path, model_name: str) -> Path:
    """The directory TF Serving's ModelConfig.base_path points at for this model."""
    if not _MODEL_NAME.match(model_name) or model_name in (".", ".."):
        raise ValueError(f"invalid model name {model_name!r}")
    return Path(model_base) / model_name


def model_name_reserved(model_name: str) -> bool:
    """A name the model server's own files use (any case: some filesystems fold it)."""
    return model_name.lower() in SERVER_FILES


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


def publish_version(
    *, source: Path, model_base: Path, model_name: str, untrusted: bool = False,
    verify: Callable[[Path], object] | None = None, after: int = 0,
) -> PublishedVersion:
    """Copies a SavedModel directory in as the next version: above every version on disk and
    above `after` (the caller's record of versions whose files are gone), or 1.

    `untrusted`: the source was written by user code; it is copied as plain_tree_copy does
    (UnsafeSource for a link or a special file), never following a symbolic link.
    `verify`: called on the copy before it appears under its version number (a server polling
    the model's directory never sees what it refuses); its exception is the caller's.
    """
    source = Path(source)
    if untrusted:
        plain_tree_check(root=source)
    if not (source / "saved_model.pb").is_file() and not (source / "saved_model.pbtxt").is_file():
        raise ValueError(f"{source} does not contain saved_model.pb")
    directory = model_path(model_base=model_base, model_name=model_name)
    directory.mkdir(parents=True, exist_ok=True)
    staging = directory / f"{_STAGING_PREFIX}{uuid.uuid4().hex}"
    staging.mkdir()  # honours the umask, so servers running as another user can read it
    try:
        if untrusted:
            # Checked above and walked again while copying: what changed in between is
            # refused the same way, never followed.
            plain_tree_copy(source=source, destination=staging)
        else:
            _tree_copy(source=source, destination=staging)
        if verify is not None:
            verify(staging)
        return _rename_into_place(staging, directory, after=after)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


class _CopyFailed(Exception):
    """Carries a file's OSError past copytree, which would collect it and go on copying."""


def _copy_or_stop(source: str, destination: str) -> object:
    try:
        return shutil.copy2(source, destination)
    except OSError as error:
        raise _CopyFailed(error) from error


def _tree_copy(*, source: Path, destination: Path) -> None:
    """copytree that stops at the first file it cannot write, raising that file's OSError (a
    full disk stays recognisable as ENOSPC instead of becoming one shutil.Error of them all)."""
    try:
        shutil.copytree(source, destination, symlinks=False, dirs_exist_ok=True,
                        copy_function=_copy_or_stop)
    except _CopyFailed as failed:
        raise failed.args[0] from None


def plain_tree_check(*, root: Path) -> None:
    """Refuses (UnsafeSource) a tree that is not made of directories and regular files only.

    Everything is looked at with lstat, nothing is followed or read: a symbolic link to another
    experiment's files or to /etc is reported as a link.
    """
    _plain_tree_walk(source=Path(root), destination=None)


def plain_tree_copy(*, source: Path, destination: Path) -> None:
    """Copies a tree of directories and regular files into the existing `destination`.

    Each directory and file is opened relative to its parent's descriptor with O_NOFOLLOW, so a
    symbolic link swapped in after plain_tree_check is refused, not followed; permission bits
    (without set-id bits) and modification times are kept.
    """
    _plain_tree_walk(source=Path(source), destination=Path(destination))


def _plain_tree_walk(*, source: Path, destination: Path | None) -> None:
    # Messages name paths inside the tree only: where the tree lives is the caller's business.
    shown = "the source directory"
    try:
        mode = os.lstat(source).st_mode
    except OSError as error:
        raise UnsafeSource(f"{shown} cannot be read: {error.strerror}") from error
    if stat.S_ISLNK(mode):
        raise UnsafeSource(f"{shown} is a symbolic link")
    if not stat.S_ISDIR(mode):
        raise UnsafeSource(f"{shown} is a {_kind(mode)}, not a directory")
    root = _source_open(name=str(source), flags=_DIR_FLAGS, dir_fd=None, shown=shown)
    try:
        _plain_dir_walk(fd=root, shown="", destination=destination, depth=0)
    finally:
        os.close(root)


def _plain_dir_walk(*, fd: int, shown: str, destination: Path | None, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise UnsafeSource(f"{shown.rstrip('/')} is nested more than {_MAX_DEPTH} directories deep")
    try:
        names = sorted(os.listdir(fd))
    except OSError as error:
        where = shown.rstrip("/") or "the source directory"
        raise UnsafeSource(f"{where} cannot be listed: {error.strerror}") from error
    for name in names:
        path = f"{shown}{name}"
        try:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        except OSError as error:
            raise UnsafeSource(f"{path} cannot be read: {error.strerror}") from error
        if stat.S_ISLNK(mode):
            raise UnsafeSource(f"{path} is a symbolic link")
        if stat.S_ISDIR(mode):
            child = _source_open(name=name, flags=_DIR_FLAGS, dir_fd=fd, shown=path)
            try:
                target = None
                if destination is not None:
                    target = destination / name
                    target.mkdir()
                _plain_dir_walk(fd=child, shown=f"{path}/", destination=target, depth=depth + 1)
            finally:
                os.close(child)
        elif stat.S_ISREG(mode):
            if destination is not None:
                _plain_file_copy(dir_fd=fd, name=name, shown=path, target=destination / name)
        else:
            raise UnsafeSource(f"{path} is a {_kind(mode)}, not a regular file or directory")


def _plain_file_copy(*, dir_fd: int, name: str, shown: str, target: Path) -> None:
    source = _source_open(name=name, flags=_FILE_FLAGS, dir_fd=dir_fd, shown=shown)
    try:
        status = os.fstat(source)
        if not stat.S_ISREG(status.st_mode):
            raise UnsafeSource(f"{shown} is a {_kind(status.st_mode)}, not a regular file")
        os.set_blocking(source, True)
        with open(target, "xb") as out:
            while chunk := os.read(source, _COPY_CHUNK):
                out.write(chunk)
            os.fchmod(out.fileno(), stat.S_IMODE(status.st_mode) & 0o777)
        os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))
    finally:
        os.close(source)


def _source_open(*, name: str, flags: int, dir_fd: int | None, shown: str) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as error:
        if error.errno == errno.ELOOP:  # O_NOFOLLOW met a link swapped in after the lstat
            raise UnsafeSource(f"{shown} is a symbolic link") from error
        raise UnsafeSource(f"{shown} cannot be read: {error.strerror}") from error


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISREG, "regular file"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return kind
    return "special file"


def _rename_into_place(staging: Path, directory: Path, *, after: int) -> PublishedVersion:
    for _ in range(_MAX_ATTEMPTS):
        existing = list_versions(model_path=directory)
        version = max([after, *existing]) + 1
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


def leftovers_find(*, model_base: Path, known: set[Path], older_than: float) -> list[Path]:
    """What an interrupted publish leaves under each model's directory: staging copies, and
    version directories that no version the platform knows of (`known`) names. Only those last
    changed more than `older_than` seconds ago: a younger one may be a publish under way."""
    now = time.time()
    found = []
    for model in _subdirectories(Path(model_base)):
        for entry in _subdirectories(model):
            interrupted = entry.name.startswith(_STAGING_PREFIX) or (
                _parse_version(entry.name) is not None
                and Path(os.path.normpath(entry)) not in known
            )
            # ctime, not mtime: a copy keeps its source's mtime, but nobody sets a ctime.
            if interrupted and now - entry.lstat().st_ctime > older_than:
                found.append(entry)
    return sorted(found)


def _subdirectories(folder: Path) -> list[Path]:
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]


def tree_bytes(*, root: Path) -> int:
    """The bytes of the regular files under `root`, links not followed (a link is not its
    target's size); 0 when it is gone."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                status = os.lstat(os.path.join(folder, name))
                if stat.S_ISREG(status.st_mode):
                    total += status.st_size
    return total


def version_remove(*, model_base: Path, path: Path) -> None:
    """Deletes a published version's directory; only ever one inside the model base path, and
    never through a link."""
    base = Path(model_base).resolve()
    target = Path(path)
    if target.is_symlink() or not target.resolve().is_relative_to(base) or target.resolve() == base:
        raise ValueError(f"{path} is not a version directory under {base}")
    shutil.rmtree(target, ignore_errors=True)
