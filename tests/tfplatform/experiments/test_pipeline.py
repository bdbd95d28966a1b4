"""An experiment submitted through the API runs through a real Celery worker node."""

import platform
from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tests import live
from tests.factories import UserFactory
from tfplatform.cluster.models import Node
from tfplatform.experiments.models import Experiment

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def worker_node(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    name = f"pipeline-{tmp_path.name[-12:]}"
    log = tmp_path / "worker.log"
    process = live.worker_start(node=name, log=log, PLATFORM_WORK_DIR=str(tmp_path / "work"))
    live.wait_for(
        lambda: Node.objects.filter(hostname=name).exists(),
        timeout=60,
        what="node registration",
        log=log,
    )
    yield name, log
    live.stop(process)


def test_worker_process_uses_the_standard_platform_module(worker_node: tuple[str, Path]) -> None:
    node = Node.objects.get(hostname=worker_node[0])
    assert node.os_info.startswith(platform.platform())
    assert node.devices.filter(kind="cpu").count() == 1


def test_experiment_trains_end_to_end_through_celery(worker_node: tuple[str, Path]) -> None:
    _, log = worker_node
    client = APIClient()
    client.force_authenticate(UserFactory())
    response = client.post(
        "/api/v1/experiments/",
        {
            "name": "digits through celery",
            "model": "mlp",
            "dataset": "digits",
            "hyperparameters": {"epochs": 3, "batch_size": 32, "learning_rate": 0.01},
            "target_accuracy": 0.8,
        },
        format="json",
    )
    assert response.status_code == 201
    experiment_id = response.json()["id"]

    def finished() -> bool:
        state = Experiment.objects.values_list("state", flat=True).get(pk=experiment_id)
        return state in ("completed", "failed", "canceled")

    live.wait_for(finished, timeout=240, what="the experiment to finish", log=log)
    experiment = Experiment.objects.get(pk=experiment_id)
    assert experiment.state == "completed", (experiment.error, log.read_text()[-3000:])
    assert experiment.strategy
    metrics = client.get(f"/api/v1/experiments/{experiment_id}/metrics/?name=val_accuracy").json()
    assert [m["epoch"] for m in metrics] == [1, 2, 3] or [m["epoch"] for m in metrics] == [0, 1, 2]
    assert metrics[-1]["value"] >= 0.8
    trial = experiment.trials.get()
    assert trial.state == "completed"
    assert not trial.allocations.filter(released_at__isnull=True).exists()
