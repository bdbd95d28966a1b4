"""A Spark cluster as a backend: staff register it, its node process serves pool spark-NAME, and
an experiment there trains as one Spark application (pyspark, local[2]) whose barrier stage is
the trial's MultiWorkerMirrored gang; its metrics, logs and export are the platform's, and it
deploys and predicts like any other."""

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.db.models.functions import Now
from rest_framework.test import APIClient

from tests import live
from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.modelregistry.conftest import version_loaded
from tfplatform.cluster.models import Device, Node, SparkCluster
from tfplatform.experiments.models import Experiment

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CLUSTER = {"name": "dev", "master": "local[2]", "task_slots": 2,
           "conf": {"spark.driver.memory": "512m"}}


@pytest.fixture(scope="module")
def spark_node_process(tmp_path_factory: pytest.TempPathFactory, django_db_setup: None,
                       django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """The cluster's node, once per module (Django, Celery); each test finds its rows fresh."""
    home = tmp_path_factory.mktemp("spark-node")
    log, work = home / "spark-node.log", home / "work"
    with django_db_blocker.unblock():
        cluster = SparkCluster.objects.create(**CLUSTER)
    process = live.start(
        [sys.executable, "manage.py", "spark_node", "--cluster", "dev",
         "--address", "127.0.0.1"],
        env=live.child_env(PLATFORM_WORK_DIR=str(work)), log=log)
    with django_db_blocker.unblock():
        live.wait_for(lambda: Node.objects.filter(hostname="spark-dev").exists(), timeout=60,
                      what="the Spark node's registration", log=log)
        node = Node.objects.get(hostname="spark-dev")
        devices = list(Device.objects.filter(node=node))
    live.wait_for(lambda: " ready." in log.read_text(errors="replace"), timeout=60,
                  what="the Spark node to consume", log=log)
    yield {"log": log, "work": work, "process": process, "node": node, "devices": devices,
           "cluster": cluster}
    live.stop(process, timeout=60)


@pytest.fixture
def spark_node(spark_node_process: dict[str, Any], transactional_db: None,
               platform_settings_override: PlatformSettingsOverride) -> Iterator[Path]:
    log = spark_node_process["log"]
    assert spark_node_process["process"].poll() is None, log.read_text()[-3000:]
    if not SparkCluster.objects.filter(name="dev").exists():  # the last test's flush took them
        SparkCluster.objects.bulk_create([spark_node_process["cluster"]])
        Node.objects.bulk_create([spark_node_process["node"]])
        Device.objects.bulk_create(spark_node_process["devices"])
        Node.objects.filter(hostname="spark-dev").update(last_heartbeat=Now())
    platform_settings_override(work_dir=spark_node_process["work"])
    yield log
    live.wait_for(lambda: not live.work_dir_pids(spark_node_process["work"]), timeout=90,
                  what="this test's trial tasks to end", log=log)


def _submit(client: APIClient, **resources: Any) -> Any:
    return client.post("/api/v1/experiments/", {
        "name": "on spark", "model": "mlp", "dataset": "digits",
        "hyperparameters": {"epochs": 3, "batch_size": 32, "learning_rate": 0.01},
        "resources": {"workers": 2, "pool": "spark-dev", **resources},
    }, format="json")


def test_a_two_worker_experiment_trains_as_a_barrier_stage_and_deploys(
    spark_node: Path, model_server: dict[str, Any]
) -> None:
    owner, stranger = APIClient(), APIClient()
    owner.force_authenticate(UserFactory())
    stranger.force_authenticate(UserFactory())
    for refused in ({"min_workers": 1}, {"gpu_fraction": 0.5, "gpus_per_worker": 0}):
        answer = _submit(owner, **refused)
        assert answer.status_code == 400 and "Spark" in json.dumps(answer.json()), answer.json()
    submitted = _submit(owner)
    assert submitted.status_code == 201, submitted.json()
    experiment_id = submitted.json()["id"]
    assert live.experiment_wait_finished(experiment_id, timeout=300, log=spark_node) == \
        "completed", Experiment.objects.get(pk=experiment_id).error
    experiment = Experiment.objects.get(pk=experiment_id)
    assert experiment.strategy == "MultiWorkerMirroredStrategy"
    metrics = owner.get(f"/api/v1/experiments/{experiment_id}/metrics/?name=val_accuracy").json()
    assert [m["epoch"] for m in metrics] == [1, 2, 3]
    logs = json.dumps(owner.get(f"/api/v1/experiments/{experiment_id}/logs/").json())
    assert "Spark stage attempt 1" in logs and "worker:1 exited with code 0" in logs
    work = spark_node.parent / "work" / f"experiment-{experiment_id}"
    assert (work / "checkpoints").is_dir()
    assert list((work / "tensorboard").rglob("events.out.tfevents.*"))  # for TensorBoard
    artifacts = owner.get(f"/api/v1/experiments/{experiment_id}/artifacts/").json()
    assert {a["name"] for a in artifacts} >= {"model", "checkpoints", "logs"}, artifacts
    # Another user: as if the experiment were not there.
    assert stranger.get(f"/api/v1/experiments/{experiment_id}/").status_code == 404
    assert stranger.get(
        f"/api/v1/experiments/{experiment_id}/metrics/?name=val_accuracy").status_code == 404

    deployed = owner.post(f"/api/v1/experiments/{experiment_id}/deploy/",
                          {"model_name": "sparky"}, format="json")
    assert deployed.status_code == 202, deployed.content
    assert version_loaded(owner, "sparky", 1)["state"] == "available"
    from sklearn.datasets import load_digits

    digits = load_digits()
    answer = owner.post("/api/v1/models/sparky:predict",
                        data=json.dumps({"instances": digits.data[:64].tolist()}),
                        content_type="application/json")
    assert answer.status_code == 200, answer.content
    predicted = np.array([row["class_id"] for row in answer.json()["predictions"]])
    assert (predicted == digits.target[:64]).mean() > 0.7
