"""What a finished experiment leaves to download: its SavedModel, its checkpoints, its logs.

Each artifact is a zip streamed as it is read (zipstream-ng, stored, so its size is known before
the first byte and shown beside the link). The files were written by the trial, which is hostile:
only regular files are taken, found without following a link and opened with O_NOFOLLOW, so a
link planted in the work directory never leads outside it. The folders come from the
experiment's id, never from the request.
"""

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.http import StreamingHttpResponse
from zipstream import ZIP_STORED, ZipStream

from tfplatform.core.errors import Conflict, NotFound
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.execution import experiment_run_dir, experiment_work_dir
from tfplatform.experiments.services.transitions import TERMINAL_STATES

CHUNK_BYTES = 1 << 20
KINDS: dict[str, str] = {
    "model": "the exported SavedModel (what deploy serves)",
    "checkpoints": "the last checkpoints with their progress, and the best epoch's checkpoint",
    "logs": "every attempt's task logs (what the tasks printed)",
}


@dataclass(frozen=True)
class _File:
    path: Path
    arcname: str
    size: int
    identity: tuple[int, int]  # (st_dev, st_ino): what was listed is what is read


@dataclass(frozen=True)
class Artifact:
    name: str
    description: str
    filename: str
    files: int
    size_bytes: int  # of the zip


def artifacts_list(*, experiment: Experiment) -> list[Artifact]:
    """The artifacts this experiment has (none before it finished, none that are empty)."""
    if experiment.state not in TERMINAL_STATES:
        return []
    found = []
    for name, description in KINDS.items():
        files = _files(experiment=experiment, name=name)
        if files:
            found.append(Artifact(
                name=name, description=description, filename=_filename(experiment, name),
                files=len(files), size_bytes=len(_zip(files)),
            ))
    return found


def artifact_open(*, experiment: Experiment, name: str) -> tuple[Artifact, Iterator[bytes]]:
    """One artifact and its bytes, read as they are sent."""
    if name not in KINDS:
        raise NotFound(f"No artifact {name!r}; there are {', '.join(KINDS)}.")
    if experiment.state not in TERMINAL_STATES:
        raise Conflict("Artifacts can be downloaded once the experiment has finished.")
    files = _files(experiment=experiment, name=name)
    if not files:
        raise NotFound(f"This experiment has no {name} to download.")
    archive = _zip(files)
    artifact = Artifact(name=name, description=KINDS[name],
                        filename=_filename(experiment, name), files=len(files),
                        size_bytes=len(archive))
    return artifact, iter(archive)


def artifact_response(*, experiment: Experiment, name: str) -> StreamingHttpResponse:
    """The download, for the API and the page alike: a zip of announced length."""
    artifact, chunks = artifact_open(experiment=experiment, name=name)
    response = StreamingHttpResponse(chunks, content_type="application/zip")
    response["Content-Length"] = str(artifact.size_bytes)
    response["Content-Disposition"] = f'attachment; filename="{artifact.filename}"'
    return response


def _filename(experiment: Experiment, name: str) -> str:
    return f"experiment-{experiment.pk}-{name}.zip"


def _files(*, experiment: Experiment, name: str) -> list[_File]:
    work = experiment_work_dir(experiment_id=experiment.pk)
    if name == "model":
        return _walk(root=work / "export", prefix="model")
    if name == "checkpoints":
        return [*_walk(root=work / "checkpoints", prefix="checkpoints"),
                *_walk(root=work / "best", prefix="best")]
    attempts = experiment_run_dir(experiment_id=experiment.pk) / "attempts"
    return [f for f in _walk(root=attempts, prefix="attempts") if f.arcname.endswith(".log")]


def _walk(*, root: Path, prefix: str) -> list[_File]:
    """Regular files under `root`, never through a link; sorted, so the zip is reproducible."""
    found: list[_File] = []
    if root.is_symlink():
        return found
    try:
        entries = sorted(os.scandir(root), key=lambda entry: entry.name)
    except OSError:  # missing (nothing exported), or not a folder
        return found
    for entry in entries:
        status = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(status.st_mode):
            found += _walk(root=Path(entry.path), prefix=f"{prefix}/{entry.name}")
        elif stat.S_ISREG(status.st_mode):
            found.append(_File(path=Path(entry.path), arcname=f"{prefix}/{entry.name}",
                                size=status.st_size, identity=(status.st_dev, status.st_ino)))
    return found


def _zip(files: list[_File]) -> ZipStream:
    archive = ZipStream(compress_type=ZIP_STORED, sized=True)
    for file in files:
        archive.add(_read(file), file.arcname, size=file.size)
    return archive


def _read(file: _File) -> Iterator[bytes]:
    """The file's bytes, opened without following a link; the same file that was listed."""
    descriptor = os.open(file.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        if (status.st_dev, status.st_ino) != file.identity or status.st_size != file.size:
            raise OSError(f"{file.arcname} changed while it was being sent")
        while chunk := handle.read(CHUNK_BYTES):
            yield chunk
