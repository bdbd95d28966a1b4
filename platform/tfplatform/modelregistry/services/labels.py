"""Labels (stable, canary) and the canary's share of requests. Each change is an audit row on
the model (`actor`: who made it): a label moved to an older version is a rollback, to any other
a promotion."""

from django.db import transaction

from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import Actor, audit_changes, audit_record, audit_snapshot
from tfplatform.core.errors import (
    Conflict,
    InvalidInput,
    NotFound,
)
from tfplatform.modelregistry.models import (
    ModelLabel,
    ModelVersion,
    RegisteredModel,
)
from tfplatform.modelregistry.selectors.routes import model_route_cache_clear
from tfplatform.modelregistry.services.sync import model_server_sync
from tfplatform.modelregistry.services.versions import model_versions_retire

LABELS = tuple(ModelLabel.Name.values)
SETTINGS_FIELDS = ("canary_percent", "public")


def model_label_set(*, model: RegisteredModel, label: str, version: ModelVersion,
                    actor: Actor = None) -> None:
    """Promote or roll back: point `label` at `version` (which must be loaded)."""
    if label not in LABELS:
        raise InvalidInput(f"label must be one of: {', '.join(LABELS)}.", field="label")
    if version.model_id != model.pk:
        raise NotFound("Model version not found.")
    if version.state != ModelVersion.State.AVAILABLE:
        raise Conflict(f"Version {version.version} is {version.state}, not available.")
    with transaction.atomic():
        current = (ModelLabel.objects.select_for_update(of=("self",)).select_related("version")
                   .filter(model=model, label=label).first())
        held = current.version.version if current is not None else None
        ModelLabel.objects.update_or_create(model=model, label=label,
                                            defaults={"version": version})
        rollback = held is not None and version.version < held
        audit_record(actor=actor, target=model,
                     action=AuditAction.LABEL_ROLLBACK if rollback else AuditAction.LABEL_PROMOTE,
                     before={"label": label, "version": held},
                     after={"label": label, "version": version.version})
    model_server_sync()


def model_label_remove(*, model: RegisteredModel, label: str, actor: Actor = None) -> None:
    if label == ModelLabel.Name.STABLE:
        raise Conflict("The stable label can be moved but not removed.")
    with transaction.atomic():
        found = (ModelLabel.objects.select_for_update(of=("self",)).select_related("version")
                 .filter(model=model, label=label).first())
        if found is None:
            raise NotFound(f"The model has no '{label}' label.")
        audit_record(actor=actor, action=AuditAction.LABEL_REMOVE, target=model,
                     before={"label": label, "version": found.version.version}, after=None)
        found.delete()
        model_versions_retire(model=model)  # the version it held may be past the newest ones
    model_server_sync()


def model_settings_update(
    *, model: RegisteredModel, public: bool | None = None, canary_percent: int | None = None,
    actor: Actor = None,
) -> RegisteredModel:
    if canary_percent is not None and not 0 <= canary_percent <= 100:
        raise InvalidInput("canary_percent must be between 0 and 100.", field="canary_percent")
    with transaction.atomic():
        before = audit_snapshot(obj=model, fields=SETTINGS_FIELDS)
        if canary_percent is not None:
            model.canary_percent = canary_percent
        if public is not None:
            model.public = public
        model.save(update_fields=list(SETTINGS_FIELDS))
        old, new = audit_changes(before=before,
                                 after=audit_snapshot(obj=model, fields=SETTINGS_FIELDS))
        if new:
            audit_record(actor=actor, action=AuditAction.MODEL_CHANGE, target=model,
                         before=old, after=new)
    model_route_cache_clear()
    return model
