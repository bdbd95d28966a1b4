"""The model server's list of models: the config file and the running server."""

import contextlib
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction

from serving import layout
from serving.client import ModelEntry, ModelServerError
from tfplatform.core.errors import (
    Unavailable,
)
from tfplatform.modelregistry.models import (
    ModelVersion,
    RegisteredModel,
)
from tfplatform.modelregistry.selectors.routes import model_route_cache_clear
from tfplatform.modelregistry.server import (
    LOAD_TIMEOUT_SECONDS,
    model_config_write,
    model_server_client,
)

EMPTY_MODEL_CONFIG = "model_config_list {\n}\n"
# Not the scheduler's key (experiments.services.scheduling): syncs wait only for each other.
SYNC_LOCK_KEY = 7_305_002


SERVED_STATES = (ModelVersion.State.LOADING, ModelVersion.State.AVAILABLE)


def model_base_path() -> Path:
    return Path(settings.PLATFORM.model_base_path)


def model_config_path() -> Path:
    return model_base_path() / "models.config"


def model_config_ensure() -> Path:
    """The model server's config file must exist before it starts, even with no models yet."""
    path = model_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(EMPTY_MODEL_CONFIG)
    return path


def model_server_entries() -> list[ModelEntry]:
    entries = []
    for model in RegisteredModel.objects.prefetch_related("versions", "labels__version"):
        versions = tuple(
            sorted(v.version for v in model.versions.all() if v.state in SERVED_STATES)
        )
        if not versions:
            continue
        labels = {
            label.label: label.version.version
            for label in model.labels.all()
            if label.version.version in versions
        }
        entries.append(
            ModelEntry(
                name=model.name,
                base_path=str(
                    layout.model_path(model_base=model_base_path(), model_name=model.name)
                ),
                versions=versions,
                labels=labels,
            )
        )
    return entries


def model_config_rewrite() -> Path:
    """The config file from the rows alone, for a model server not started yet (a restore)."""
    path = model_config_ensure()
    model_config_write(entries=model_server_entries(), path=path)
    return path


def model_server_sync() -> None:
    """After every change of versions or labels: the server and this process's routes follow."""
    model_route_cache_clear()
    # Two syncs (the loader's, a label moved in a request) never interleave: each reads the
    # list after the one before it has written and sent its own, so a stale list never lands
    # last. SQLite serializes its writers already.
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SYNC_LOCK_KEY])
        entries = model_server_entries()
        model_config_write(entries=entries, path=model_config_ensure())
        try:
            model_server_client().reload_config(models=entries, timeout=LOAD_TIMEOUT_SECONDS)
        except (ModelServerError, TimeoutError) as error:
            raise Unavailable(
                f"The model server did not accept the new model list: {error}") from error


def model_server_sync_quietly() -> None:
    # The failure that brought us here is what the caller reports.
    with contextlib.suppress(Unavailable):
        model_server_sync()
