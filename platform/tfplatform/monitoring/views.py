import os

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY, CollectorRegistry, multiprocess
from prometheus_client.exposition import choose_encoder

from tfplatform.monitoring.access import metrics_scrape_check
from tfplatform.monitoring.collector import PlatformCollector
from tfplatform.monitoring.health import component_health_list, health_overall
from tfplatform.web.cluster_views import staff_only


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


HEALTH_PILL: dict[str, str] = {"ok": "state-completed", "degraded": "state-running",
                               "down": "state-failed"}


@staff_only
@require_GET
def cluster_health_page(request: HttpRequest) -> HttpResponse:
    components = component_health_list()
    overall = health_overall(components=components)
    return render(request, "cluster/health.html", {
        "overall": overall, "overall_pill": HEALTH_PILL[overall],
        "rows": [(component, HEALTH_PILL[component.status]) for component in components],
    })
