"""Labels (stable, canary) and the canary's share of requests."""



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


def model_label_set(*, model: RegisteredModel, label: str, version: ModelVersion) -> None:
    """Promote or roll back: point `label` at `version` (which must be loaded)."""
    if label not in LABELS:
        raise InvalidInput(f"label must be one of: {', '.join(LABELS)}.", field="label")
    if version.model_id != model.pk:
        raise NotFound("Model version not found.")
    if version.state != ModelVersion.State.AVAILABLE:
        raise Conflict(f"Version {version.version} is {version.state}, not available.")
    ModelLabel.objects.update_or_create(model=model, label=label, defaults={"version": version})
    model_server_sync()


def model_label_remove(*, model: RegisteredModel, label: str) -> None:
    if label == ModelLabel.Name.STABLE:
        raise Conflict("The stable label can be moved but not removed.")
    deleted, _ = ModelLabel.objects.filter(model=model, label=label).delete()
    if not deleted:
        raise NotFound(f"The model has no '{label}' label.")
    model_versions_retire(model=model)  # the version it held may be past the newest ones
    model_server_sync()


def model_settings_update(
    *, model: RegisteredModel, public: bool | None = None, canary_percent: int | None = None
) -> RegisteredModel:
    if canary_percent is not None:
        if not 0 <= canary_percent <= 100:
            raise InvalidInput("canary_percent must be between 0 and 100.", field="canary_percent")
        model.canary_percent = canary_percent
    if public is not None:
        model.public = public
    model.save(update_fields=["canary_percent", "public"])
    model_route_cache_clear()
    return model
