"""Gangs across worker nodes: two real Celery worker processes as two nodes on loopback."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tests import live
from tests.factories import EnvironmentFactory, UserFactory
from tfplatform.cluster.models import Allocation, Node
from tfplatform.experiments.models import Experiment
from training.isolation.container_settings import RUNTIME_IMAGE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _nodes_start(tmp_path: Path, addresses: tuple[str, str] = ("127.0.0.1", "127.0.0.2"),
                 **env: str) -> dict[str, object]:
    """Nodes on 127.0.0.1 and 127.0.0.2: one machine, but peers reach each by its own address."""
    work = str(tmp_path / "work")  # shared storage, as the compose work volume is
    nodes: dict[str, object] = {}
    for name, address in zip(("node-a", "node-b"), addresses, strict=True):
        log = tmp_path / f"{name}.log"
        process = live.start(
            [
                *live.WORKER_ARGS,
                "--node",
                f"{name}-{tmp_path.name[-6:]}",
                "--cpu-slots",
                "1",
                "--gpu-slots",
                "0",
                "--address",
                address,
            ],
            env=live.child_env(PLATFORM_WORK_DIR=work, **env),
            log=log,
        )
        nodes[name] = {"process": process, "log": log, "address": address}
    live.wait_for(
        lambda: Node.objects.count() == 2, timeout=60, what="two nodes", log=tmp_path / "node-b.log"
    )
    return nodes


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[dict[str, object]]:
    nodes = _nodes_start(tmp_path)
    yield nodes
    live.stop_all([node["process"] for node in nodes.values()])  # type: ignore[index]


def test_two_worker_experiment_is_gang_scheduled_across_both_nodes(
    two_nodes: dict[str, object],
) -> None:
    client = APIClient()
    client.force_authenticate(UserFactory())
    response = client.post(
        "/api/v1/experiments/",
        {
            "name": "across nodes",
            "model": "mlp",
            "dataset": "digits",
            "hyperparameters": {"epochs": 3, "batch_size": 32, "learning_rate": 0.01},
            "resources": {"workers": 2, "gpus_per_worker": 0, "parameter_servers": 0},
        },
        format="json",
    )
    assert response.status_code == 201
    experiment_id = response.json()["id"]
    log = two_nodes["node-a"]["log"]  # type: ignore[index]
    live.wait_for(
        lambda: Experiment.objects.get(pk=experiment_id).state in ("completed", "failed"),
        timeout=300,
        what="the gang to finish",
        log=log,
    )
    experiment = Experiment.objects.get(pk=experiment_id)
    assert experiment.state == "completed", (experiment.error, log.read_text()[-3000:])
    assert experiment.strategy == "MultiWorkerMirroredStrategy"
    trial = experiment.trials.get()
    hosts = set(Allocation.objects.filter(trial=trial).values_list("node__address", flat=True))
    assert hosts == {"127.0.0.1", "127.0.0.2"}
    assert not Allocation.objects.filter(trial=trial, released_at__isnull=True).exists()
    assert Allocation.objects.filter(trial=trial, started_at__isnull=True).count() == 0
    epochs = live.metric_epochs(client, experiment_id)
    assert epochs == [1, 2, 3]


def test_killed_node_mid_training_resumes_from_checkpoint_when_it_returns(
    two_nodes: dict[str, object], tmp_path: Path
) -> None:
    import os
    import signal

    client = APIClient()
    client.force_authenticate(UserFactory())
    response = client.post(
        "/api/v1/experiments/",
        {
            "name": "survives a node",
            "model": "mlp",
            "dataset": "digits",
            "max_restarts": 3,
            "hyperparameters": {"epochs": 8, "batch_size": 16, "learning_rate": 0.01},
            "resources": {"workers": 2, "gpus_per_worker": 0, "parameter_servers": 0},
        },
        format="json",
    )
    experiment_id = response.json()["id"]
    node_b: dict[str, object] = two_nodes["node-b"]  # type: ignore[assignment]
    log_a = two_nodes["node-a"]["log"]  # type: ignore[index]

    def epochs() -> list[int]:
        return live.metric_epochs(client, experiment_id)

    live.wait_for(lambda: len(epochs()) >= 2, timeout=240, what="two epochs", log=log_a)
    process = node_b["process"]
    os.killpg(process.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    process.wait()  # type: ignore[attr-defined]
    live.wait_for(
        lambda: Experiment.objects.get(pk=experiment_id).trials.filter(state="failed").exists(),
        timeout=120,
        what="the gang to notice the dead node",
        log=log_a,
    )
    name = Node.objects.get(address="127.0.0.2").hostname
    node_b["process"] = live.start(
        [
            *live.WORKER_ARGS,
            "--node",
            name,
            "--cpu-slots",
            "1",
            "--gpu-slots",
            "0",
            "--address",
            "127.0.0.2",
        ],
        env=live.child_env(PLATFORM_WORK_DIR=str(tmp_path / "work")),
        log=tmp_path / "node-b-again.log",
    )
    live.wait_for(
        lambda: Experiment.objects.get(pk=experiment_id).state in ("completed", "failed"),
        timeout=300,
        what="the resumed gang to finish",
        log=log_a,
    )
    experiment = Experiment.objects.get(pk=experiment_id)
    assert experiment.state == "completed", experiment.error
    states = list(experiment.trials.order_by("restart_count").values_list("state", flat=True))
    assert states.count("completed") == 1 and states[-1] == "completed"
    assert epochs() == list(range(1, 9))  # resumed, not restarted: no epoch twice


def test_cancel_stops_every_process_of_a_multi_node_gang(
    two_nodes: dict[str, object], tmp_path: Path
) -> None:
    import time

    client = APIClient()
    client.force_authenticate(UserFactory())
    response = client.post(
        "/api/v1/experiments/",
        {
            "name": "cancel across nodes",
            "model": "mlp",
            "dataset": "digits",
            "hyperparameters": {"epochs": 500, "batch_size": 8},
            "resources": {"workers": 2, "gpus_per_worker": 0, "parameter_servers": 0},
        },
        format="json",
    )
    experiment_id = response.json()["id"]
    log = two_nodes["node-a"]["log"]  # type: ignore[index]
    live.wait_for(
        lambda: (
            Experiment.objects.get(pk=experiment_id).trials.filter(metrics__name="loss").exists()
        ),
        timeout=240,
        what="the gang to train",
        log=log,
    )

    assert len(live.trial_task_pids(experiment_id)) == 2  # one task on each node
    started = time.monotonic()
    assert client.post(f"/api/v1/experiments/{experiment_id}/cancel/").status_code == 202
    live.wait_for(
        lambda: Experiment.objects.get(pk=experiment_id).state == "canceled",
        timeout=60,
        what="the cancel",
        log=log,
    )
    live.wait_for(
        lambda: not live.trial_task_pids(experiment_id),
        timeout=30,
        what="every task to exit",
        log=log,
    )
    assert time.monotonic() - started < 45
    assert not Allocation.objects.filter(released_at__isnull=True).exists()


@pytest.mark.parametrize(("gang_network", "addresses"), [
    ("host", ("127.0.0.1", "127.0.0.2")),  # nodes on several machines
    ("gang", ("gang-node-a", "gang-node-b")),  # nodes on one engine, as in compose
])
def test_a_gang_across_nodes_runs_in_containers(
    tmp_path: Path, podman_engine: str, gang_network: str, addresses: tuple[str, str]
) -> None:
    """Under podman each node's task is a container. Across nodes they use the host's network,
    which Landlock narrows to the gang's own ports; or, where the nodes share one engine, an
    internal network of the gang's own, on which each node's task answers to its address."""
    nodes = _nodes_start(tmp_path, addresses, PLATFORM_TRIAL_RUNTIME="podman",
                         PLATFORM_CONTAINER_ENGINE_URL=podman_engine,
                         PLATFORM_CONTAINER_OCI_RUNTIME="runc",
                         PLATFORM_CONTAINER_GANG_NETWORK=gang_network)
    try:
        EnvironmentFactory(name="node-image", image=RUNTIME_IMAGE)
        client = APIClient()
        client.force_authenticate(UserFactory())
        response = client.post("/api/v1/experiments/", {
            "name": "containers across nodes", "model": "mlp", "dataset": "digits",
            "environment": "node-image",
            "hyperparameters": {"epochs": 2, "batch_size": 32, "learning_rate": 0.01},
            "resources": {"workers": 2, "gpus_per_worker": 0, "parameter_servers": 0},
        }, format="json")
        assert response.status_code == 201, response.json()
        experiment_id = response.json()["id"]
        log = nodes["node-a"]["log"]  # type: ignore[index]
        state = live.experiment_wait_finished(experiment_id, timeout=300, log=log)
        experiment = Experiment.objects.get(pk=experiment_id)
        assert state == "completed", (experiment.error, log.read_text()[-3000:])
        trial = experiment.trials.get()
        assert trial.runtime == "podman"
        hosts = set(Allocation.objects.filter(trial=trial).values_list("node__address", flat=True))
        assert hosts == set(addresses)
    finally:
        live.stop_all([node["process"] for node in nodes.values()])  # type: ignore[index]
