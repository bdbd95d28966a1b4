"""A Spark cluster's pool takes only the experiments that ask for it, and only what it can run:
the scheduler never places anything else there, and submission refuses what a Spark pool does
not take."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import DeviceFactory, NodeFactory, UserFactory
from tfplatform.cluster.models import Device, Node, SparkCluster
from tfplatform.cluster.spark import spark_node_register, spark_target_for
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.scheduling import scheduler_pass

pytestmark = pytest.mark.django_db


def _submit(user: Any, **resources: Any) -> Any:
    client = APIClient()
    client.force_authenticate(user)
    return client.post("/api/v1/experiments/", {
        "name": "x", "model": "mlp", "dataset": "digits", "hyperparameters": {"epochs": 1},
        "resources": resources}, format="json")


def _spark_node(*, slots: int = 2) -> Node:
    cluster = SparkCluster.objects.create(name="dev", master="local[2]", task_slots=slots,
                                          conf={"spark.executor.memory": "1g"})
    return spark_node_register(cluster=cluster, address="10.0.0.9")


def test_its_node_offers_the_clusters_slots_in_a_pool_of_its_own() -> None:
    node = _spark_node(slots=3)
    assert (node.hostname, node.pool, node.trial_runtime) == ("spark-dev", "spark-dev", "spark")
    assert not node.isolated
    assert node.devices.filter(kind=Device.Kind.CPU).count() == 3
    target = spark_target_for(node=node, channel_host=node.address)
    assert (target.master, target.conf, target.channel_host) == (
        "local[2]", {"spark.executor.memory": "1g"}, "10.0.0.9")


def test_only_experiments_that_ask_for_its_pool_are_placed_there() -> None:
    _spark_node(slots=2)
    user = UserFactory()
    anywhere = _submit(user)
    # Only the Spark pool has nodes: a request for no pool could never start.
    assert anywhere.status_code == 400, anywhere.json()
    assert "Spark" in str(anywhere.json())
    plain = NodeFactory(hostname="plain")
    DeviceFactory(node=plain, kind=Device.Kind.CPU, index=0)
    unplaced = _submit(user).json()["id"]
    on_spark = _submit(user, workers=2, pool="spark-dev").json()["id"]
    scheduler_pass()
    placed = {e.pk: set(e.trials.get().allocations.values_list("node__hostname", flat=True))
              for e in Experiment.objects.filter(pk__in=[unplaced, on_spark])}
    assert placed == {unplaced: {"plain"}, on_spark: {"spark-dev"}}


def test_what_a_spark_pool_does_not_take_is_refused_at_submission() -> None:
    _spark_node(slots=2)
    user = UserFactory()
    for resources, words in (
        ({"workers": 2, "min_workers": 1}, "elastic range"),
        ({"gpu_fraction": 0.5}, "share of a GPU"),
        ({"workers": 3}, "CPU slot"),
    ):
        answer = _submit(user, pool="spark-dev", **resources)
        assert answer.status_code == 400, (resources, answer.json())
        assert words in str(answer.json()), (resources, answer.json())
    client = APIClient()
    client.force_authenticate(user)
    workspace = client.post("/api/v1/workspaces/", {"name": "nb", "pool": "spark-dev"},
                            format="json")
    assert workspace.status_code == 400 and "workspace" in str(workspace.json())


def test_a_spark_query_needs_a_spark_pool_and_workers_alone() -> None:
    _spark_node(slots=4)
    plain = NodeFactory(hostname="plain")
    DeviceFactory(node=plain, kind=Device.Kind.CPU, index=0)
    client = APIClient()
    client.force_authenticate(UserFactory())

    def submit(query: object, **resources: Any) -> Any:
        return client.post("/api/v1/experiments/", {
            "name": "q", "model": "mlp", "dataset": "digits",
            "hyperparameters": {"epochs": 1, "spark_query": query},
            "resources": resources}, format="json")

    for query, resources, words in (
        ("SELECT 1", {}, "ask for its pool"),
        ("SELECT 1", {"pool": "spark-dev", "workers": 2, "parameter_servers": 1},
         "parameter servers"),
        (["SELECT 1"], {"pool": "spark-dev"}, "Spark SQL query"),
        ("x" * 20_001, {"pool": "spark-dev"}, "Spark SQL query"),
    ):
        answer = submit(query, **resources)
        assert answer.status_code == 400, (query, answer.json())
        assert words in str(answer.json()), answer.json()
    assert submit("SELECT 1", pool="spark-dev", workers=2).status_code == 201


def test_a_worker_node_cannot_join_a_pool_named_as_a_spark_clusters() -> None:
    from tfplatform.cluster.services import node_register
    from tfplatform.core.errors import InvalidInput

    with pytest.raises(InvalidInput, match="Spark cluster"):
        node_register(hostname="w", cpu_count=1, memory_bytes=1, devices=[],
                      trial_runtime="sandbox", pool="spark-dev")


def test_the_experiment_form_offers_the_spark_pool_and_submits_to_it() -> None:
    from django.test import Client

    _spark_node(slots=2)
    client = Client()
    client.force_login(UserFactory())
    assert '<option value="spark-dev">spark-dev</option>' in client.get(
        "/experiments/new/").content.decode()
    form = {"name": "from the form", "model": "mlp", "dataset": "digits", "epochs": 1,
            "batch_size": 32, "learning_rate": 0.01, "optimizer": "adam", "workers": 2,
            "gpus_per_worker": 0, "parameter_servers": 0, "priority": 0, "max_restarts": 0,
            "pool": "spark-dev"}
    assert client.post("/experiments/new/", form).status_code == 302
    assert Experiment.objects.get(name="from the form").pool == "spark-dev"
