"""Celery tasks counted through prometheus-client from Celery's task signals, in /metrics and
on a worker's own metrics port."""

import pytest
import requests
from django.test import Client
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from tests import live
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.cluster.dispatch import SCHEDULER_WAKE_TASK
from tfplatform.config.celery import app
from tfplatform.experiments.tasks import scheduler_wake

pytestmark = pytest.mark.django_db


@app.task(name="tests.monitoring.fails")
def fails() -> None:
    raise RuntimeError("as intended")


def count(task: str, state: str) -> float:
    return REGISTRY.get_sample_value(
        "tfplatform_celery_tasks_total", {"task": task, "state": state}) or 0.0


def test_a_task_run_is_counted_with_its_state_and_duration(client: Client,
                                                           settings: object,
    platform_settings_override: PlatformSettingsOverride) -> None:
    done, failed = count(SCHEDULER_WAKE_TASK, "SUCCESS"), count("tests.monitoring.fails", "FAILURE")
    durations = REGISTRY.get_sample_value(
        "tfplatform_celery_task_duration_seconds_count", {"task": SCHEDULER_WAKE_TASK}) or 0.0
    scheduler_wake.apply()  # runs here, through Celery's tracer and its signals
    fails.apply()
    assert count(SCHEDULER_WAKE_TASK, "SUCCESS") == done + 1
    assert count("tests.monitoring.fails", "FAILURE") == failed + 1
    assert REGISTRY.get_sample_value("tfplatform_celery_task_duration_seconds_count",
                                     {"task": SCHEDULER_WAKE_TASK}) == durations + 1
    platform_settings_override(metrics_token="a-token")
    text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer a-token").content.decode()
    found = {(s.name, s.labels.get("task"), s.labels.get("state")): s.value
             for family in text_string_to_metric_families(text) for s in family.samples}
    assert found[("tfplatform_celery_tasks_total", SCHEDULER_WAKE_TASK, "SUCCESS")] == done + 1


def test_a_worker_serves_its_task_metrics_on_the_configured_port(settings: object,
    platform_settings_override: PlatformSettingsOverride) -> None:
    from celery.signals import worker_ready

    port = live.free_port()
    platform_settings_override(celery_metrics_port=port, celery_metrics_address="127.0.0.1")
    worker_ready.send(sender=None)
    scheduler_wake.apply()
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    names = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    assert "tfplatform_celery_tasks_total" in names
