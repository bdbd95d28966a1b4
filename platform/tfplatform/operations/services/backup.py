"""A whole installation into one folder: the database as one consistent snapshot, then the
stored files (archive.py describes the folder).

    manifest = backup_create(output=Path("/backups/2026-11-27"), work=False)
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction
from django.db.migrations.recorder import MigrationRecorder

from tfplatform.core.errors import Conflict
from tfplatform.operations.archive import DATABASE, Manifest, area_pack, file_digest

# Rebuilt by `migrate` (content types, permissions) or not worth keeping across a restore
# (sessions sign everyone out anyway; login-failure records would lock people out again).
EXCLUDED = ["contenttypes", "auth.permission", "sessions", "axes"]


def backup_areas(*, work: bool) -> dict[str, Path]:
    """The stored folders a backup holds, by area."""
    config = settings.PLATFORM
    areas = {"models": Path(config.model_base_path), "uploads": Path(settings.MEDIA_ROOT),
             "datasets": Path(config.datasets_dir)}
    if work:
        areas["work"] = Path(config.work_dir)
    return {area: root.resolve() for area, root in areas.items()}


def migrations_applied() -> dict[str, list[str]]:
    applied: dict[str, list[str]] = {}
    for app, name in sorted(MigrationRecorder(connection).applied_migrations()):
        applied.setdefault(app, []).append(name)
    return applied


def backup_create(*, output: Path, work: bool = False) -> Manifest:
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise Conflict(f"{output} exists and is not an empty folder: a backup never overwrites.")
    output.mkdir(mode=0o700, parents=True, exist_ok=True)
    output.chmod(0o700)  # it holds every password hash and token
    # One snapshot for every table: under PostgreSQL's default isolation each query would see
    # the rows committed before it, so a version published mid-dump could lose its model.
    outermost = not connection.in_atomic_block  # a caller's transaction keeps its own view
    with transaction.atomic():
        if connection.vendor == "postgresql" and outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        migrations = migrations_applied()
        call_command("dumpdata", natural_foreign=True, natural_primary=True, exclude=EXCLUDED,
                     output=str(output / DATABASE), verbosity=0)
    # After the snapshot: a file written since is only one more (a version's files removed
    # since are missing, which backup.md tells operators).
    areas = backup_areas(work=work)
    for area, root in areas.items():
        area_pack(root=root, archive=output / f"{area}.tar.gz")
    names = [DATABASE, *(f"{area}.tar.gz" for area in areas)]
    manifest = Manifest(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        database_vendor=connection.vendor,
        migrations=migrations,
        files={name: file_digest(path=output / name) for name in names},
        roots={area: str(root) for area, root in areas.items()},
    )
    manifest.write(folder=output)
    return manifest
