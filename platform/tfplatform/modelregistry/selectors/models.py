"""Which models and versions a caller may see or change."""

from django.contrib.auth.models import AnonymousUser
from django.db.models import Q, QuerySet, Sum

from tfplatform.accounts.models import User
from tfplatform.accounts.visibility import visible_to
from tfplatform.core.errors import Forbidden, NotFound
from tfplatform.modelregistry.models import (
    ModelLabel,
    ModelVersion,
    RegisteredModel,
)


def model_list(*, user: User | AnonymousUser) -> QuerySet[RegisteredModel]:
    own = visible_to(queryset=RegisteredModel.objects.all(), user=user)
    if not user.is_authenticated:
        return own
    return RegisteredModel.objects.filter(Q(pk__in=own.values("pk")) | Q(public=True))


def model_get(*, user: User | AnonymousUser, name: str) -> RegisteredModel:
    model = model_list(user=user).filter(name=name).first()
    if model is None:
        # The same answer TF Serving gives for a model it does not serve: names reveal nothing.
        raise NotFound(f"Servable not found for request: Latest({name})")
    return model


def model_get_for_change(*, user: User | AnonymousUser, name: str) -> RegisteredModel:
    model = model_get(user=user, name=name)
    if not visible_to(queryset=RegisteredModel.objects.filter(pk=model.pk), user=user).exists():
        raise Forbidden("Only the model's owner, their team and staff can change it.")
    return model


def model_version_get(*, model: RegisteredModel, version: int) -> ModelVersion:
    found = model.versions.filter(version=version).first()
    if found is None:
        raise NotFound(f"Model {model.name} has no version {version}.")
    return found


def model_version_list(*, user: User | AnonymousUser) -> QuerySet[ModelVersion]:
    return (
        ModelVersion.objects.filter(model__in=model_list(user=user))
        .select_related("model", "source_experiment")
        .prefetch_related("labels")
    )


def model_label_versions(*, model: RegisteredModel) -> dict[str, int]:
    return dict(ModelLabel.objects.filter(model=model).values_list("label", "version__version"))


def model_signature_version(*, model: RegisteredModel) -> ModelVersion | None:
    """The version whose signature the model page shows: the stable one, else the newest
    that has one."""
    versions = model.versions.exclude(signatures={})
    stable = versions.filter(labels__label=ModelLabel.Name.STABLE).first()
    return stable or versions.order_by("-version").first()


def model_loading(*, model: RegisteredModel) -> bool:
    """Whether a version of it is still on its way into the model server."""
    return model.versions.filter(state=ModelVersion.State.LOADING).exists()


def version_bytes_of(*, user: User) -> int:
    """What the user's published model versions take on disk."""
    total = ModelVersion.objects.filter(model__owner=user).aggregate(n=Sum("size_bytes"))["n"]
    return int(total or 0)
