import os

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY, CollectorRegistry, multiprocess
from prometheus_client.exposition import choose_encoder

from tfplatform.monitoring.access import metrics_scrape_check
from tfplatform.monitoring.collector import PlatformCollector


def metrics_registry() -> CollectorRegistry:
    """This process's metrics, or all gunicorn workers' (prometheus-client's multiprocess
    mode, PROMETHEUS_MULTIPROC_DIR), plus the platform's, read from the database."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(REGISTRY)
    registry.register(PlatformCollector())
    return registry


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    metrics_scrape_check(request=request)
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(metrics_registry()), content_type=content_type)
