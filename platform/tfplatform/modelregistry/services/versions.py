"""A version's lifecycle: loaded, retired, resumed, undeployed."""

import contextlib
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from serving import layout
from serving.client import ModelServerError
from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import Actor, audit_record
from tfplatform.core.errors import (
    Conflict,
    Unavailable,
)
from tfplatform.modelregistry.dispatch import version_load_on_commit
from tfplatform.modelregistry.models import (
    ModelLabel,
    ModelVersion,
    RegisteredModel,
)
from tfplatform.modelregistry.server import (
    LOAD_TIMEOUT_SECONDS,
    model_server_client,
)
from tfplatform.modelregistry.services.sync import (
    SERVED_STATES,
    model_base_path,
    model_server_sync,
    model_server_sync_quietly,
)
from tfplatform.notifications.events import EventKind
from tfplatform.notifications.services import event_publish


class ModelServerUnreachable(Unavailable):
    """The model server did not answer at all (not started yet, restarting): nothing is known
    of the version, which stays LOADING; the loader's task tries again (tasks.py)."""

    code = "model_server_unreachable"


def _unreachable(error: BaseException | None) -> bool:
    """No answer from the server (gRPC's UNAVAILABLE: nothing listens, or the connection
    dropped), as opposed to an answer about the version."""
    while error is not None:
        if isinstance(error, ConnectionError) or (
                isinstance(error, ModelServerError) and error.code == "UNAVAILABLE"):
            return True
        error = error.__cause__
    return False


def model_version_load(*, version_id: int) -> ModelVersion | None:
    """The loader's work: the server gets the list with this version, which becomes AVAILABLE
    (and `stable` when its model has none) or FAILED with the server's reason. None when the
    version is no longer waiting (undeployed meanwhile, or loaded by an earlier delivery).
    Raises ModelServerUnreachable, the version still LOADING, when the server does not answer:
    a version published in the seconds before the server listens is not its fault."""
    version = ModelVersion.objects.select_related("model").filter(
        pk=version_id, state=ModelVersion.State.LOADING).first()
    if version is None:
        return None
    try:
        model_server_sync()
        model_server_client().wait_available(
            name=version.model.name, version=version.version, timeout=LOAD_TIMEOUT_SECONDS
        )
    except (ModelServerError, TimeoutError, Unavailable) as error:
        if _unreachable(error):
            raise ModelServerUnreachable(
                f"The model server is not answering; version {version.version} of "
                f"'{version.model.name}' stays loading and is tried again: {error}") from error
        ModelVersion.objects.filter(pk=version.pk, state=ModelVersion.State.LOADING).update(
            state=ModelVersion.State.FAILED, error=str(error)[:2000]
        )
        model_server_sync_quietly()  # a failed version leaves the list
        version.refresh_from_db()
        if version.state == ModelVersion.State.FAILED:
            event_publish(kind=EventKind.DEPLOY_FAILED, owner_id=version.model.owner_id,
                          team_id=version.model.team_id, payload={
                              "id": version.pk, "model": version.model.name,
                              "version": version.version, "error": version.error[-1000:]})
        return version
    # One transaction: no reader may see the first version available yet without `stable`,
    # nor the new version available beside one it retires.
    with transaction.atomic():
        ModelVersion.objects.filter(pk=version.pk, state=ModelVersion.State.LOADING).update(
            state=ModelVersion.State.AVAILABLE)
        version.refresh_from_db()
        labelled = retired = False
        if version.state == ModelVersion.State.AVAILABLE:
            _, labelled = ModelLabel.objects.get_or_create(
                model=version.model, label=ModelLabel.Name.STABLE, defaults={"version": version})
            if labelled:  # the platform labels a model's first version
                audit_record(actor=None, action=AuditAction.LABEL_PROMOTE, target=version.model,
                             before={"label": ModelLabel.Name.STABLE, "version": None},
                             after={"label": ModelLabel.Name.STABLE, "version": version.version})
            retired = bool(model_versions_retire(model=version.model))
            event_publish(kind=EventKind.DEPLOY_AVAILABLE, owner_id=version.model.owner_id,
                          team_id=version.model.team_id, payload={
                              "id": version.pk, "model": version.model.name,
                              "version": version.version, "labelled_stable": labelled})
    if retired or labelled:
        model_server_sync_quietly()
    return version


def model_versions_retire(*, model: RegisteredModel) -> list[int]:
    """Only the labelled and the newest PLATFORM_MODEL_VERSIONS_LOADED versions stay loaded:
    every loaded version holds the model server's memory. The others become UNLOADED (their
    files stay); returns their numbers."""
    keep = settings.PLATFORM.model_versions_loaded
    served = list(model.versions.filter(state__in=SERVED_STATES).order_by("-version")
                  .values_list("version", flat=True))
    labelled = set(model.labels.values_list("version__version", flat=True))
    retired = [v for v in served[keep:] if v not in labelled]
    model.versions.filter(version__in=retired).update(state=ModelVersion.State.UNLOADED)
    return retired


def model_versions_loading_resume(*, older_than: float = 0.0) -> list[int]:
    """Loads again what waits LOADING with no message on its way: the loader does this as it
    starts (a message lost with its process) and every few minutes for versions waiting longer
    than `older_than` seconds (the broker was away when the version was published). A version
    loaded meanwhile makes the copy of its message do nothing."""
    cutoff = timezone.now() - timedelta(seconds=older_than)
    waiting = list(ModelVersion.objects.filter(state=ModelVersion.State.LOADING,
                                               created_at__lte=cutoff)
                   .order_by("pk").values_list("pk", flat=True))
    for version_id in waiting:
        version_load_on_commit(version_id=version_id)
    return waiting


def model_version_undeploy(*, version: ModelVersion, actor: Actor = None) -> ModelVersion:
    """Stop serving one version and remove its files (a retired version's too); its labels
    go (an audit row each, `actor` who undeployed it)."""
    if (
        version.labels.filter(label=ModelLabel.Name.STABLE).exists()
        and version.model.versions.filter(state=ModelVersion.State.AVAILABLE)
        .exclude(pk=version.pk)
        .exists()
    ):
        raise Conflict("Move the stable label to another version before undeploying this one.")
    with transaction.atomic():
        for label in version.labels.select_for_update():
            audit_record(actor=actor, action=AuditAction.LABEL_REMOVE, target=version.model,
                         before={"label": label.label, "version": version.version}, after=None)
        version.labels.all().delete()
        ModelVersion.objects.filter(pk=version.pk).update(state=ModelVersion.State.UNLOADED)
    model_server_sync()
    # Its files go too (they count against the owner's storage); the row stays as history.
    with contextlib.suppress(ValueError):
        layout.version_remove(model_base=model_base_path(), path=Path(version.path))
    ModelVersion.objects.filter(pk=version.pk).update(size_bytes=0)
    version.refresh_from_db()
    return version
