"""Where a registered dataset may live: in its team's (or teamless owner's) folder of a root.

A registered URI is later shown, read-only, to every trial that uses the dataset (sandbox.py
`trial_paths`), so a registration is a request to read files on the nodes. A local URI must lie
in `PLATFORM_DATASET_ROOTS` with no link below the root
(training/isolation/dataset_mounts.py, the check the node repeats as it mounts the folder), in
the folder the operator gives its holder:
`<root>/<team name>/…` for a team's dataset, `<root>/users/<username>/…` for a teamless owner's.
Staff may also register elsewhere in a root, never in a team's or a user's folder that is not
the dataset's own. Never registrable, whatever the roots: the platform's own folders and files
(uploads, homes, boards, shared, work, runs, models, environments, the database file, the
secret key), a folder holding them or var/, a whole root, another holder's dataset. Each shard
is resolved too: a link inside the folder pointing out of it is refused.
"""

import os
from pathlib import Path

from django.conf import settings
from django.db import connections
from django.db.models import Q

from tfplatform.accounts.models import Team, User
from tfplatform.core.errors import InvalidInput
from tfplatform.datasets.models import Dataset
from training import errors as training_errors
from training.isolation.dataset_mounts import mount_check
from training.shard_schema import (
    local_shards,
    scheme_plugins_check,
    uri_base,
    uri_check,
    uri_scheme,
)

USERS_FOLDER = "users"
# The host's own: a root set to / must not reach them (/proc/<pid>/environ holds secrets).
SYSTEM_FOLDERS = ("/proc", "/sys", "/dev", "/run", "/etc", "/boot")


def dataset_roots() -> tuple[Path, ...]:
    return tuple(Path(root).resolve() for root in settings.PLATFORM.dataset_roots)


def dataset_mount_roots() -> list[str]:
    """The roots as a trial's spec carries them: as configured and resolved, since a URI may
    name either (a root may be a link; nothing below it may)."""
    given = [str(Path(os.path.abspath(root))) for root in settings.PLATFORM.dataset_roots]
    return list(dict.fromkeys([*given, *(str(root) for root in dataset_roots())]))


def _database_files() -> list[Path]:
    files = []
    for settings_dict in (settings.DATABASES["default"], connections["default"].settings_dict):
        if "sqlite" not in settings_dict["ENGINE"]:
            continue
        for name in (settings_dict.get("NAME"), (settings_dict.get("TEST") or {}).get("NAME")):
            if name and os.path.isabs(str(name)):
                files += [Path(f"{name}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")]
    return files


def _forbidden() -> tuple[Path, ...]:
    """Neither registrable nor held by a registered folder."""
    config = settings.PLATFORM
    places = [settings.MEDIA_ROOT, settings.STATIC_ROOT, settings.VAR_DIR / "secret_key",
              settings.VAR_DIR / "broker", *_database_files(), *SYSTEM_FOLDERS,
              config.work_dir, config.run_dir, config.model_base_path, config.environments_dir,
              config.model_import_dir, config.datasets_dir, config.shared_dir, config.board_dir,
              config.home_dir]
    if config.tf_serving_profiler_dir:
        places.append(config.tf_serving_profiler_dir)
    return tuple(Path(place).resolve() for place in places)


def _platform_check(*, path: Path, roots: tuple[Path, ...], uri: str, field: str) -> None:
    var, repository = Path(settings.VAR_DIR).resolve(), Path(settings.ROOT_DIR).resolve()
    clash = next((place for place in _forbidden()
                  if path.is_relative_to(place) or place.is_relative_to(path)), None)
    if clash is None:
        clash = next((place for place in (var, repository) if place.is_relative_to(path)), None)
    # Inside var/ only through a root placed there on purpose (the default var/data): a root
    # set wider must not reach the test databases, logs and keys var/ also holds.
    if clash is None and path.is_relative_to(var) and not any(
            path.is_relative_to(root) and root.is_relative_to(var) and root != var
            for root in roots):
        clash = var
    if clash is not None:
        raise InvalidInput(f"{uri} is or holds the platform's own {clash}, which is never "
                           "registrable.", field=field)


def _folder_name(name: str) -> bool:
    return bool(name) and name not in (".", "..", USERS_FOLDER) and "/" not in name \
        and "\x00" not in name


def _own_parts(*, owner: User, team: Team | None) -> tuple[str, ...] | None:
    """The holder's folder below each root; None for a team whose name is no folder's."""
    if team is not None:
        return (team.name,) if _folder_name(team.name) else None
    return (USERS_FOLDER, owner.username) if _folder_name(owner.username) else None


def _holder_check(*, path: Path, root: Path, owner: User, team: Team | None, staff: bool,
                  uri: str, field: str) -> None:
    parts = path.relative_to(root).parts
    own = _own_parts(owner=owner, team=team)
    if own is not None and parts[:len(own)] == own:
        return
    whose = f"team {team.name}'s" if team is not None else f"{owner.username}'s"
    where = root.joinpath(*own) if own is not None else None
    if parts[0] == USERS_FOLDER:
        problem = f"{root / USERS_FOLDER} holds each teamless user's own folder"
    elif Team.objects.filter(name=parts[0]).exists():
        problem = f"{root / parts[0]} is another team's folder"
    elif staff:
        return
    elif where is None:
        problem = f"{whose} name cannot be a folder's; staff register its datasets"
    else:
        problem = f"{whose} datasets live in {where}"
    raise InvalidInput(f"{uri} cannot be registered as {whose}: {problem}.", field=field)


def _same_holder(*, team: Team | None, owner: User) -> Q:
    return Q(team=team) if team is not None else Q(team__isnull=True, owner=owner)


def _overlap_check(*, path: Path, owner: User, team: Team | None, uri: str, field: str,
                   dataset_id: int | None) -> None:
    """Another holder's dataset neither holds this folder nor lies inside it (a staff member
    may have put one outside the teams' folders)."""
    others = Dataset.objects.filter(deleted_at__isnull=True).exclude(
        _same_holder(team=team, owner=owner))
    if dataset_id is not None:
        others = others.exclude(pk=dataset_id)
    for other in others.only("train_uri", "validation_uri").iterator():
        for other_uri in (other.train_uri, other.validation_uri):
            if uri_scheme(other_uri):
                continue
            try:
                theirs = Path(uri_base(other_uri)).resolve()
            except (OSError, RuntimeError, ValueError):
                continue
            if path.is_relative_to(theirs) or theirs.is_relative_to(path):
                raise InvalidInput(f"{uri} overlaps another team's or user's registered "
                                   "dataset.", field=field)


def location_check(*, uri: str, field: str, owner: User, team: Team | None, staff: bool,
                   dataset_id: int | None = None) -> list[Path]:
    """The split's shard files (none for a remote URI: TensorFlow lists those in the trial),
    once the split's folder is found to be the holder's. `staff`: a registration by staff
    (or a check of an existing dataset), which may lie outside the holder's folder."""
    try:
        uri_check(uri=uri)
        scheme_plugins_check(uri=uri)
    except training_errors.InvalidInput as error:
        raise InvalidInput(str(error), field=field) from error
    if uri_scheme(uri):
        return []
    base = uri_base(uri)
    try:
        real = Path(mount_check(path=base, roots=dataset_mount_roots()))
    except training_errors.InvalidInput as error:
        raise InvalidInput(f"{error}.", field=field) from error
    roots = dataset_roots()
    root = max((root for root in roots if real.is_relative_to(root) and real != root),
               key=lambda root: len(root.parts), default=None)
    if root is None:  # the root, if a link, changed since the check
        raise InvalidInput(f"{uri} is not inside the dataset roots.", field=field)
    _platform_check(path=real, roots=roots, uri=uri, field=field)
    _holder_check(path=real, root=root, owner=owner, team=team, staff=staff, uri=uri,
                  field=field)
    _overlap_check(path=real, owner=owner, team=team, uri=uri, field=field,
                   dataset_id=dataset_id)
    try:
        shards = [Path(shard) for shard in local_shards(uri=uri)]
        resolved = [shard.resolve(strict=True) for shard in shards]
    except FileNotFoundError as error:
        raise InvalidInput(f"{uri}: a shard does not exist ({error}).", field=field) from error
    except (OSError, RuntimeError, ValueError) as error:  # too long, a link loop, a NUL
        raise InvalidInput(f"{uri} cannot be read: {error}", field=field) from error
    escaping = [str(shard) for shard, found in zip(shards, resolved, strict=True)
                if not found.is_relative_to(real)]
    if escaping:
        raise InvalidInput(f"{uri}: {escaping[0]} leads out of the dataset's folder.",
                           field=field)
    if not shards:
        raise InvalidInput(f"{uri} holds no shard files.", field=field)
    return shards


def dataset_locations_check(*, dataset: Dataset) -> None:
    """An existing dataset's folders, checked again as a trial is built: they may have become
    links, or another holder's, since it was registered."""
    for uri in (dataset.train_uri, dataset.validation_uri):
        location_check(uri=uri, field="dataset", owner=dataset.owner, team=dataset.team,
                       staff=True, dataset_id=dataset.pk)
