"""A registered dataset's folder, checked once more, links not followed, before it is mounted.

The platform checks a dataset's folder when it is registered and when a trial is built, but the
folder's owners may replace any part of it with a link afterwards, and a bind mount follows
links. So every component below a dataset root is opened with O_NOFOLLOW, each relative to the
one before (no name is looked up twice), and a link anywhere refuses the mount; a sandbox then
binds the folder by that descriptor (bwrap --ro-bind-fd), not by its name. The roots come
in the trial's spec (`TrialSpec.dataset_roots`), as plain paths: the operator's own, so a root
itself may be a link.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from training.errors import InvalidInput
from training.shard_schema import ShardedSource, local_roots


def mount_check(*, path: str, roots: Sequence[str]) -> str:
    """The real path of a dataset folder (or file) that lies, with no link below its root,
    strictly inside one of `roots`; InvalidInput saying why otherwise."""
    fd, real = mount_open(path=path, roots=roots)
    os.close(fd)
    return real


def mount_open(*, path: str, roots: Sequence[str]) -> tuple[int, str]:
    """`mount_check`, keeping the folder open (O_PATH): what a sandbox binds by descriptor, so a
    link swapped in after the check is never what it mounts. The caller closes it."""
    given = Path(os.path.normpath(path))
    if not given.is_absolute() or ".." in Path(path).parts:
        raise InvalidInput(f"{path}: a dataset path must be absolute, without '..'")
    under = sorted((Path(os.path.normpath(root)) for root in roots
                    if Path(root).is_absolute() and given.is_relative_to(os.path.normpath(root))),
                   key=lambda root: len(root.parts), reverse=True)
    if not under:
        shown = ", ".join(roots) or "none configured"
        raise InvalidInput(f"{path} is not inside the dataset roots ({shown})")
    root = under[0]
    parts = given.relative_to(root).parts
    if not parts:
        raise InvalidInput(f"{path} is a whole dataset root; only a folder inside one is a dataset")
    try:
        fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise InvalidInput(f"the dataset root {root} cannot be opened: {error.strerror}") from error
    try:
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        for depth, part in enumerate(parts, start=1):
            try:
                child = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError as error:
                raise InvalidInput(f"{path} does not exist") from error
            except OSError as error:
                raise InvalidInput(f"{path} cannot be opened: {error.strerror}") from error
            os.close(fd)
            fd = child
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                raise InvalidInput(
                    f"{path}: {root.joinpath(*parts[:depth])} is a symbolic link; a dataset's "
                    "folder must be a real folder below its root, with no link on the way")
            if depth < len(parts) and not stat.S_ISDIR(mode):
                raise InvalidInput(f"{path} does not exist")
    except BaseException:
        os.close(fd)
        raise
    return fd, str(real.joinpath(*parts))


def mounts_open(*, paths: Sequence[str], roots: Sequence[str]) -> dict[str, int]:
    """`mount_open` for each path, all or none (those opened are closed on a refusal)."""
    opened: dict[str, int] = {}
    try:
        for path in dict.fromkeys(paths):
            opened[path] = mount_open(path=path, roots=roots)[0]
    except BaseException:
        for fd in opened.values():
            os.close(fd)
        raise
    return opened


def local_roots_checked(*, source: ShardedSource, roots: Sequence[str]) -> tuple[str, ...]:
    """`local_roots` of a source, each one checked by `mount_check` now, as it is mounted."""
    folders = local_roots(source=source)
    for folder in folders:
        try:
            mount_check(path=folder, roots=roots)
        except InvalidInput as error:
            raise InvalidInput(f"dataset {source.name!r} cannot be mounted: {error}") from error
    return folders
