"""A backup's folder and what its manifest says of it.

    backup/
      manifest.json        format, when, the schema (applied migrations), each file's SHA-256,
                           and where each stored area lay on the machine that made it
      database.json.gz     every row (Django's serialization; natural keys for users and groups)
      models.tar.gz        the model store: every version's SavedModel
      uploads.tar.gz       uploaded modules and dataset files of experiments
      datasets.tar.gz      uploaded datasets
      work.tar.gz          trials' working folders (checkpoints, exports), with --work only
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tfplatform.core.errors import InvalidInput

FORMAT = 1
MANIFEST = "manifest.json"
DATABASE = "database.json.gz"


class BackupInvalid(InvalidInput):
    code = "backup_invalid"
    default_message = "This is not a whole backup of the platform."


@dataclass(frozen=True)
class Manifest:
    created_at: str
    database_vendor: str
    # app label -> the migrations applied when the backup was made
    migrations: dict[str, list[str]]
    # file name -> SHA-256 of its bytes
    files: dict[str, str]
    # area -> the absolute folder it was taken from (paths the database holds start there)
    roots: dict[str, str] = field(default_factory=dict)
    format: int = FORMAT

    def write(self, *, folder: Path) -> None:
        (folder / MANIFEST).write_text(json.dumps(asdict(self), indent=2, sort_keys=True))

    @classmethod
    def read(cls, *, folder: Path) -> Manifest:
        try:
            data = json.loads((folder / MANIFEST).read_text())
            manifest = cls(**data)
        except (OSError, ValueError, TypeError) as error:
            raise BackupInvalid(f"{folder / MANIFEST} cannot be read as a backup's manifest: "
                                f"{error}") from error
        if manifest.format != FORMAT:
            raise BackupInvalid(f"The backup is in format {manifest.format}; this platform "
                                f"reads format {FORMAT}.")
        return manifest


def file_digest(*, path: Path) -> str:
    with path.open("rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def files_verify(*, folder: Path, manifest: Manifest, needed: list[str]) -> None:
    """Every file the manifest names is there, byte for byte, and it names every file the
    restore will read (`needed`): a restore never starts on a backup cut short or changed
    since."""
    for name in needed:
        if name not in manifest.files:
            raise BackupInvalid(f"The backup lacks {name}.")
    for name, expected in manifest.files.items():
        path = folder / name
        if os.path.basename(name) != name or not path.is_file():
            raise BackupInvalid(f"The backup lacks {name}.")
        if file_digest(path=path) != expected:
            raise BackupInvalid(f"{name} is not the file the backup was made with "
                                "(its SHA-256 differs).")


def area_pack(*, root: Path, archive: Path) -> None:
    """The folder's contents, as they are; links are kept as links, never followed."""
    with tarfile.open(archive, "w:gz") as tar:
        if root.is_dir():
            for entry in sorted(root.iterdir()):
                tar.add(entry, arcname=entry.name)


def area_unpack(*, archive: Path, root: Path) -> None:
    """Into `root`, which must be empty: Python's `data` filter refuses absolute names, `..`,
    links that point outside, devices, and set-uid bits."""
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise BackupInvalid(f"{root} is not empty: a restore goes into a fresh installation.")
    with tarfile.open(archive, "r:gz") as tar:
        try:
            tar.extractall(root, filter="data")
        except tarfile.FilterError as error:
            raise BackupInvalid(f"{archive.name} holds {error}") from error
