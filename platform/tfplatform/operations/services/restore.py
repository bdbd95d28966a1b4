"""A backup into a fresh installation: checked whole before anything is written, then the
files, then every row in one transaction, then the paths the rows hold moved to this
installation's folders and the model server's config written from them.

    manifest = backup_restore(source=Path("/backups/2026-11-27"))
"""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import models, transaction
from django.db.models import F, Value
from django.db.models.functions import Concat, Substr

from tfplatform.core.errors import Conflict
from tfplatform.experiments.models import Checkpoint
from tfplatform.modelregistry.models import ModelVersion
from tfplatform.modelregistry.services.sync import model_config_rewrite
from tfplatform.operations.archive import (
    DATABASE,
    BackupInvalid,
    Manifest,
    area_unpack,
    files_verify,
)
from tfplatform.operations.releases import release_of
from tfplatform.operations.services.backup import backup_areas, migrations_applied

# Rows that hold absolute paths into a stored area: (model, field, area).
LOCATED: tuple[tuple[type[models.Model], str, str], ...] = (
    (ModelVersion, "path", "models"), (Checkpoint, "path", "work"),
)
# Written again from the restored rows, so a fresh model store may already hold it.
REWRITTEN = {"models": {"models.config"}}


def _schema_check(*, manifest: Manifest) -> None:
    made = {(app, name) for app, names in manifest.migrations.items() for name in names}
    here = {(app, name) for app, names in migrations_applied().items() for name in names}
    if made - here:
        raise BackupInvalid("The backup was made by a newer release of the platform (it has "
                            f"migrations this one lacks: {_names(made - here)}). Restore it "
                            "with that release.")
    if here - made:
        release = release_of(migrations=manifest.migrations)
        made_by = f"release {release}" if release else "an older release of the platform"
        raise BackupInvalid(f"The backup was made by {made_by} (it lacks "
                            f"{_names(here - made)}). Restore it with the release that made it, "
                            "then upgrade that installation (manage.py migrate).")


def _names(migrations: set[tuple[str, str]]) -> str:
    shown = sorted(f"{app}.{name}" for app, name in migrations)
    return ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")


def _fresh_check(*, roots: dict[str, Path]) -> None:
    if get_user_model().objects.exists():
        raise Conflict("This installation already has accounts: a restore goes into a fresh "
                       "one (before platform_bootstrap).")
    for area, root in roots.items():
        kept = REWRITTEN.get(area, set())
        if root.is_dir() and any(entry.name not in kept for entry in root.iterdir()):
            raise Conflict(f"{root} is not empty: a restore goes into a fresh installation.")


def _paths_move(*, old: str, new: str, model: type[models.Model], field: str) -> None:
    if old == new:
        return
    rows = model._default_manager.filter(**{f"{field}__startswith": f"{old}/"})
    rows.update(**{field: Concat(Value(new), Substr(F(field), len(old) + 1))})


def backup_restore(*, source: Path) -> Manifest:
    manifest = Manifest.read(folder=source)
    roots = backup_areas(work="work" in manifest.roots)
    files_verify(folder=source, manifest=manifest,
                 needed=[DATABASE, *(f"{area}.tar.gz" for area in roots)])
    call_command("migrate", verbosity=0)
    _schema_check(manifest=manifest)
    _fresh_check(roots=roots)
    for area, root in roots.items():
        for name in REWRITTEN.get(area, set()):
            (root / name).unlink(missing_ok=True)
        area_unpack(archive=source / f"{area}.tar.gz", root=root)
    with transaction.atomic():
        call_command("loaddata", str(source / DATABASE), verbosity=0)
        for model, field, area in LOCATED:
            if area in manifest.roots:
                _paths_move(old=manifest.roots[area], new=str(roots[area]), model=model,
                            field=field)
    model_config_rewrite()
    return manifest
