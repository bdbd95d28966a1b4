"""Safe extraction of an uploaded SavedModel zip ("bring your own model").

Uploads are untrusted: entries may try to escape the target directory (absolute paths, `..`),
plant symlinks, or expand far beyond their compressed size. Everything is checked before a
byte is written; the byte count is enforced again while streaming as a second line of defence.
"""

from __future__ import annotations

import shutil
import stat
import zipfile
from pathlib import Path, PurePosixPath

DEFAULT_MAX_BYTES = 2 * 1024**3
DEFAULT_MAX_FILES = 10_000
_CHUNK = 1024 * 1024


class ArchiveError(ValueError):
    """The zip is unsafe or does not hold a SavedModel; the message is fit for the uploader."""


def _check_name(info: zipfile.ZipInfo) -> PurePosixPath:
    name = info.filename.replace("\\", "/")
    path = PurePosixPath(name)
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ArchiveError(f"absolute path in archive: {info.filename}")
    if ".." in path.parts:
        raise ArchiveError(f"'..' in archive path: {info.filename}")
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise ArchiveError(f"symlink in archive: {info.filename}")
    kind = stat.S_IFMT(mode)  # zero when the zip only records permissions
    if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
        raise ArchiveError(f"special file in archive: {info.filename}")
    return path


def _model_root(files: list[PurePosixPath]) -> PurePosixPath:
    """saved_model.pb at the top, or inside a single top-level folder."""
    names = {p for p in files if p.name in ("saved_model.pb", "saved_model.pbtxt")}
    if any(len(p.parts) == 1 for p in names):
        return PurePosixPath()
    tops = {p.parts[0] for p in files}
    if len(tops) == 1 and any(len(p.parts) == 2 for p in names):
        return PurePosixPath(next(iter(tops)))
    raise ArchiveError(
        "archive must contain saved_model.pb at its root or inside a single top-level folder"
    )


def extract_saved_model_zip(
    *,
    archive: Path,
    destination: Path,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_files: int = DEFAULT_MAX_FILES,
) -> Path:
    """Extracts into `destination` (created, must not exist) and returns the SavedModel dir."""
    destination = Path(destination)
    try:
        bundle = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArchiveError(f"not a readable zip archive: {exc}") from exc
    with bundle:
        entries = [(info, _check_name(info)) for info in bundle.infolist()]
        files = [(info, path) for info, path in entries if not info.is_dir()]
        if len({path for _, path in files}) != len(files):
            raise ArchiveError("archive has duplicate entries")
        if len(files) > max_files:
            raise ArchiveError(f"archive has {len(files)} files, more than {max_files}")
        if sum(info.file_size for info, _ in files) > max_bytes:
            raise ArchiveError(f"archive expands beyond {max_bytes} bytes")
        root = _model_root([path for _, path in files])
        destination.mkdir(parents=True)
        try:
            _extract(bundle, files, destination, max_bytes)
        except BaseException as exc:
            shutil.rmtree(destination, ignore_errors=True)
            if isinstance(exc, OSError | zipfile.BadZipFile):
                # e.g. a file and a folder with the same name, or a corrupt member
                raise ArchiveError(f"cannot extract archive: {exc}") from exc
            raise
    return destination.joinpath(*root.parts)


def _extract(
    bundle: zipfile.ZipFile,
    files: list[tuple[zipfile.ZipInfo, PurePosixPath]],
    destination: Path,
    max_bytes: int,
) -> None:
    written = 0
    base = destination.resolve()
    for info, path in files:
        target = destination.joinpath(*path.parts)
        if not target.resolve().is_relative_to(base):
            raise ArchiveError(f"archive path escapes the destination: {info.filename}")
        target.parent.mkdir(parents=True, exist_ok=True)
        with bundle.open(info) as src, open(target, "xb") as dst:
            while chunk := src.read(_CHUNK):
                written += len(chunk)
                if written > max_bytes:
                    raise ArchiveError(f"archive expands beyond {max_bytes} bytes")
                dst.write(chunk)
