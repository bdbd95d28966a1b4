"""Serving health: what the samples of the model server's metrics say (services/health.py
records them)."""

from datetime import datetime, timedelta

from django.utils import timezone

from tfplatform.modelregistry.health import WHOLE_MODEL, Counts, Health, health_compute
from tfplatform.modelregistry.models import RegisteredModel, ServingSample

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
