"""Celery task metrics through prometheus-client, from Celery's task signals: every platform
process that runs tasks counts them. A worker serves them on its own port when
PLATFORM_CELERY_METRICS_PORT is set (compose's Prometheus scrapes it); under gunicorn's
multiprocess mode a task run in the web process lands in /metrics."""

import logging
import time
from typing import Any

from celery.signals import task_postrun, task_prerun, task_retry, worker_ready
from django.conf import settings
from prometheus_client import Counter, Histogram, start_http_server

logger = logging.getLogger(__name__)

TASKS = Counter("tfplatform_celery_tasks", "Celery tasks run, by task and final state.",
                ["task", "state"])
RETRIES = Counter("tfplatform_celery_task_retries", "Celery task retries, by task.", ["task"])
DURATION = Histogram(
    "tfplatform_celery_task_duration_seconds", "Seconds a Celery task ran, by task.", ["task"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 1800.0, 7200.0, float("inf")),
)
_started: dict[str, float] = {}


def _on_prerun(*, task_id: str, **_: Any) -> None:
    _started[task_id] = time.monotonic()


def _on_postrun(*, task_id: str, task: Any, state: str | None = None, **_: Any) -> None:
    began = _started.pop(task_id, None)
    TASKS.labels(task=task.name, state=state or "UNKNOWN").inc()
    if began is not None:
        DURATION.labels(task=task.name).observe(time.monotonic() - began)


def _on_retry(*, sender: Any = None, **_: Any) -> None:
    RETRIES.labels(task=getattr(sender, "name", "unknown")).inc()


def _on_worker_ready(**_: Any) -> None:
    port = settings.PLATFORM.celery_metrics_port
    if port:
        address = settings.PLATFORM.celery_metrics_address
        start_http_server(port, addr=address)
        logger.info("Serving Celery task metrics on %s:%s", address, port)


def task_signals_connect() -> None:
    task_prerun.connect(_on_prerun, weak=False, dispatch_uid="tfplatform-metrics-prerun")
    task_postrun.connect(_on_postrun, weak=False, dispatch_uid="tfplatform-metrics-postrun")
    task_retry.connect(_on_retry, weak=False, dispatch_uid="tfplatform-metrics-retry")
    worker_ready.connect(_on_worker_ready, weak=False, dispatch_uid="tfplatform-metrics-ready")
