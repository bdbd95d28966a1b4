"""Serving health: samples of the model server's own metrics, kept a day."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from tfplatform.modelregistry.health import scrape_parse
from tfplatform.modelregistry.models import (
    RegisteredModel,
    ServingSample,
)
from tfplatform.modelregistry.server import (
    model_server_client,
)

# Health shows the last hour; a day of samples lets a restart or a gap be seen around it.
SERVING_SAMPLES_KEEP = timedelta(days=1)


def serving_health_record() -> int:
    """Scrape the model server's Prometheus endpoint once: a ServingSample for each registered
    model it reports and for each of its versions it reports, and forget samples older than
    SERVING_SAMPLES_KEEP. Returns the samples stored; raises ModelServerError when the server
    does not answer."""
    path = settings.PLATFORM.tf_serving_metrics_path
    if not path:
        return 0
    counts = scrape_parse(model_server_client().metrics(path=path))
    now = timezone.now()
    registered = RegisteredModel.objects.in_bulk(
        {name for name, _ in counts}, field_name="name")
    samples = [
        ServingSample(
            model=registered[name], version=version, recorded_at=now,
            requests_ok=figures.ok, requests_failed=figures.failed,
            latency_buckets=dict(figures.buckets),
        )
        for (name, version), figures in counts.items()
        if name in registered
    ]
    ServingSample.objects.bulk_create(samples)
    ServingSample.objects.filter(recorded_at__lt=now - SERVING_SAMPLES_KEEP).delete()
    return len(samples)
