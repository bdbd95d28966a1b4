import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from cachetools import TTLCache
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.db.models import Q, QuerySet, Sum
from django.utils import timezone

from tfplatform.accounts.models import User
from tfplatform.accounts.visibility import visible_to
from tfplatform.core.errors import Forbidden, NotFound
from tfplatform.modelregistry.health import WHOLE_MODEL, Counts, Health, health_compute
from tfplatform.modelregistry.models import (
    ModelLabel,
    ModelVersion,
    RegisteredModel,
    ServingSample,
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


@dataclass(frozen=True)
class ModelRoute:
    """What inference needs of a model the caller may use: where its traffic goes."""

    name: str
    canary_percent: int
    labels: Mapping[str, int]


_route_lock = threading.Lock()
_routes: TTLCache[tuple[object, str], ModelRoute] = TTLCache(
    maxsize=10_000, ttl=settings.PLATFORM.lookup_cache_seconds
)


def model_route_get(*, user: User | AnonymousUser, name: str) -> ModelRoute:
    """model_get + its labels, remembered for PLATFORM.lookup_cache_seconds.

    Every prediction needs them, and the two queries were a third of the platform's own time
    per request (bench/inference.py). Changes made in this process clear it at once
    (model_route_cache_clear); other web processes see them within the cache time.
    """
    key = (user.pk, name)
    with _route_lock:
        found = _routes.get(key)
    if found is None:
        model = model_get(user=user, name=name)  # not found is never remembered
        found = ModelRoute(
            name=model.name,
            canary_percent=model.canary_percent,
            labels=model_label_versions(model=model),
        )
        with _route_lock:
            _routes[key] = found
    return found


def model_route_cache_clear() -> None:
    with _route_lock:
        _routes.clear()


def model_loading(*, model: RegisteredModel) -> bool:
    """Whether a version of it is still on its way into the model server."""
    return model.versions.filter(state=ModelVersion.State.LOADING).exists()


def version_bytes_of(*, user: User) -> int:
    """What the user's published model versions take on disk."""
    total = ModelVersion.objects.filter(model__owner=user).aggregate(n=Sum("size_bytes"))["n"]
    return int(total or 0)


HEALTH_WINDOW = timedelta(hours=1)


def model_serving_health(*, model: RegisteredModel) -> Health | None:
    """Request rate, error rate and latency quantiles of the whole model over the last hour
    of scrapes; None until two scrapes in that hour reported the model."""
    return model_versions_serving_health(model=model).get(WHOLE_MODEL)


def model_versions_serving_health(*, model: RegisteredModel) -> dict[int | None, Health]:
    """The last hour's health of the whole model (key WHOLE_MODEL) and of each version the
    model server reported per version, for those that two scrapes saw."""
    since = timezone.now() - HEALTH_WINDOW
    series: dict[int | None, list[tuple[datetime, Counts]]] = {}
    samples = ServingSample.objects.filter(model=model, recorded_at__gte=since).order_by(
        "recorded_at", "id")
    for sample in samples:
        series.setdefault(sample.version, []).append((sample.recorded_at, Counts(
            ok=sample.requests_ok, failed=sample.requests_failed,
            buckets=tuple(sample.latency_buckets.items()),
        )))
    computed = {version: health_compute(points) for version, points in series.items()}
    return {version: health for version, health in computed.items() if health is not None}


