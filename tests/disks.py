"""A small disk of the test's own that it can fill: a tmpfs mounted over a folder (root only).

Tests that need one skip when not root, unless CI is set: there they must run, and fail.
"""

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER = "filler.bin"


@contextlib.contextmanager
def tmpfs_mounted(*, path: Path, megabytes: int) -> Iterator[Path]:
    if os.geteuid() != 0 and not os.environ.get("CI"):
        pytest.skip("mounting a small disk needs root")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m,mode=0755", "tmpfs",
                    str(path)], check=True)
    try:
        yield path
    finally:
        # Lazily: a process of the test (a stopped worker's child) may still hold a file there.
        subprocess.run(["umount", "-l", str(path)], check=False)


def disk_fill(*, path: Path) -> int:
    """Writes one file under `path` until the disk takes no more byte; returns its size."""
    written = 0
    with open(path / FILLER, "wb", buffering=0) as handle:
        for chunk in (1 << 20, 1 << 12, 1):
            block = b"\0" * chunk
            while True:
                try:
                    written += handle.write(block) or 0
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
                    break
    return written


def disk_free(*, path: Path) -> None:
    (path / FILLER).unlink()
