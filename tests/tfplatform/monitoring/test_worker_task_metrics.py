"""A real worker node (`manage.py worker`) counts the Celery tasks it runs and serves them on
PLATFORM_CELERY_METRICS_PORT; its emulated GPU slots register with stable NVML-shaped UUIDs; it
touches PLATFORM_LIVENESS_FILE while it runs and removes it when it stops."""

from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests import live
from tfplatform.cluster.discovery import emulated_gpu_uuid
from tfplatform.cluster.dispatch import SCHEDULER_WAKE_TASK
from tfplatform.cluster.models import Device
from tfplatform.experiments.tasks import scheduler_wake

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def wakes_done(url: str) -> float:
    try:
        text = requests.get(url, timeout=5).text
    except requests.RequestException:
        return 0.0
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "tfplatform_celery_tasks_total"
               and s.labels == {"task": SCHEDULER_WAKE_TASK, "state": "SUCCESS"})


def test_a_worker_node_serves_the_counts_of_the_tasks_it_ran(tmp_path: Path) -> None:
    port = live.free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    log = tmp_path / "worker.log"
    alive = tmp_path / "alive"
    worker = live.worker_start(
        node="metrics-node", log=log, gpu_slots=2, PLATFORM_TRIAL_RUNTIME="process",
        PLATFORM_WARM_TRIAL_PROCESSES="0", PLATFORM_WORK_DIR=str(tmp_path / "work"),
        PLATFORM_CELERY_METRICS_PORT=str(port), PLATFORM_LIVENESS_FILE=str(alive))
    try:
        live.wait_for(lambda: live.http_status(url) == 200, timeout=120,
                      what="the worker's metrics port", log=log)
        before = wakes_done(url)
        scheduler_wake.delay()
        live.wait_for(lambda: wakes_done(url) > before, timeout=60,
                      what="the wake-up to be counted", log=log)
        assert alive.exists()  # from its timer, started before it consumed the wake-up
    finally:
        assert live.stop(worker) == 0
    assert not alive.exists()
    uuids = dict(Device.objects.filter(node__hostname="metrics-node", kind="gpu")
                 .values_list("index", "uuid"))
    assert uuids == {i: emulated_gpu_uuid(hostname="metrics-node", index=i) for i in (0, 1)}
