"""Where a registered dataset may live: only under the dataset roots staff configure.

A registered URI is later shown, read-only, to every trial that uses the dataset (sandbox.py
`trial_paths`), so a registration is a request to read files on the nodes. Local URIs must
resolve, links followed, inside `PLATFORM_DATASET_ROOTS`, and neither hold nor sit inside the
platform's own folders (uploads, work and run dirs, models, environments, the secret key), even
where a root was set too wide. Each shard is resolved too: a link inside the folder pointing out
of the roots is refused like the folder itself would be.
"""

from pathlib import Path

from django.conf import settings

from tfplatform.core.errors import InvalidInput
from training import errors as training_errors
from training.shard_schema import (
    local_shards,
    scheme_plugins_check,
    uri_base,
    uri_check,
    uri_scheme,
)


def dataset_roots() -> tuple[Path, ...]:
    return tuple(Path(root).resolve() for root in settings.PLATFORM["DATASET_ROOTS"])


def _platform_folders() -> tuple[Path, ...]:
    config = settings.PLATFORM
    folders = (settings.MEDIA_ROOT, config["WORK_DIR"], config["RUN_DIR"],
               config["MODEL_BASE_PATH"], config["ENVIRONMENTS_DIR"], config["MODEL_IMPORT_DIR"],
               settings.VAR_DIR / "secret_key", settings.VAR_DIR / "broker")
    return tuple(Path(folder).resolve() for folder in folders)


def _allowed(path: Path) -> bool:
    if not any(path.is_relative_to(root) for root in dataset_roots()):
        return False
    if Path(settings.VAR_DIR).resolve().is_relative_to(path):  # it would hold all of var/
        return False
    # Inside a platform folder, or holding one (a root set too wide must not let var/ in).
    return not any(path.is_relative_to(folder) or folder.is_relative_to(path)
                   for folder in _platform_folders())


def location_check(*, uri: str, field: str) -> list[Path]:
    """The split's shard files (none for a remote URI: TensorFlow lists those in the trial)."""
    try:
        uri_check(uri=uri)
        scheme_plugins_check(uri=uri)
    except training_errors.InvalidInput as error:
        raise InvalidInput(str(error), field=field) from error
    if uri_scheme(uri):
        return []
    roots = ", ".join(str(root) for root in dataset_roots()) or "none configured"
    refused = InvalidInput(
        f"{uri} is not inside the dataset roots ({roots}); staff set PLATFORM_DATASET_ROOTS.",
        field=field,
    )
    try:
        base = Path(uri_base(uri)).resolve(strict=True)
        shards = [Path(shard) for shard in local_shards(uri=uri)]
        resolved = [shard.resolve(strict=True) for shard in shards]
    except FileNotFoundError as error:
        raise InvalidInput(f"{uri} does not exist.", field=field) from error
    except (OSError, RuntimeError, ValueError) as error:  # too long, a link loop, a NUL
        raise InvalidInput(f"{uri} cannot be read: {error}", field=field) from error
    if not _allowed(base):
        raise refused
    escaping = [str(shard) for shard, real in zip(shards, resolved, strict=True)
                if not _allowed(real) or not real.is_relative_to(base)]
    if escaping:
        raise InvalidInput(
            f"{uri}: {escaping[0]} leads out of the dataset's folder or the dataset roots.",
            field=field,
        )
    if not shards:
        raise InvalidInput(f"{uri} holds no shard files.", field=field)
    return shards

