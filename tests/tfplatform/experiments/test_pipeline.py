"""An experiment submitted through the API runs through a real Celery worker node."""

import platform
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tests import live
from tests.factories import UserFactory
from tests.paced_model import paced_upload
from tfplatform.cluster.models import Node
from tfplatform.experiments.models import Experiment

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


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
    detail = client.get(f"/api/v1/experiments/{experiment_id}/").json()
    assert detail["created_at"] < detail["first_step_at"] < detail["finished_at"]


WRONG_SHAPE_MODULE = b"""
import tf_keras as keras

def build_model(hparams):
    # digits has 10 classes; 3 outputs is the user's mistake.
    return keras.Sequential([keras.Input(shape=(64,)), keras.layers.Dense(3, activation="softmax")])
"""


def _submit(client: APIClient, **fields: object) -> int:
    response = client.post("/api/v1/experiments/", fields, format="multipart")
    assert response.status_code == 201, response.json()
    return int(response.json()["id"])


def test_user_code_error_fails_fast_with_the_error_and_is_not_retried(
    worker_node: tuple[str, Path],
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    _, log = worker_node
    client = APIClient()
    client.force_authenticate(UserFactory())
    experiment_id = _submit(
        client,
        name="wrong shape",
        model="upload",
        dataset="digits",
        max_restarts=3,
        model_file=SimpleUploadedFile("wrong.py", WRONG_SHAPE_MODULE),
        hyperparameters='{"epochs": 2}',
    )
    live.wait_for(
        lambda: live.experiment_state(experiment_id) == "failed",
        timeout=180,
        what="the experiment to fail",
        log=log,
    )
    body = client.get(f"/api/v1/experiments/{experiment_id}/").json()
    assert "shape" in body["error"].lower() or "3" in body["error"], body["error"]
    assert len(body["trials"]) == 1
    assert body["trials"][0]["retryable"] is False


def test_cancel_stops_a_running_experiment(worker_node: tuple[str, Path]) -> None:
    import time

    _, log = worker_node
    client = APIClient()
    client.force_authenticate(UserFactory())
    experiment_id = _submit(
        client,
        name="long",
        model="mlp",
        dataset="digits",
        hyperparameters='{"epochs": 500, "batch_size": 8}',
    )
    live.wait_for(
        lambda: (
            Experiment.objects.get(pk=experiment_id).trials.filter(metrics__name="loss").exists()
        ),
        timeout=180,
        what="training to start",
        log=log,
    )
    started = time.monotonic()
    assert client.post(f"/api/v1/experiments/{experiment_id}/cancel/").status_code == 202
    live.wait_for(
        lambda: live.experiment_state(experiment_id) == "canceled",
        timeout=60,
        what="the cancel to take effect",
        log=log,
    )
    assert time.monotonic() - started < 45
    trial = Experiment.objects.get(pk=experiment_id).trials.get()
    assert trial.state == "canceled"
    assert not trial.allocations.filter(released_at__isnull=True).exists()


def test_killed_trial_process_restarts_and_resumes_without_repeating_epochs(
    worker_node: tuple[str, Path],
) -> None:
    import os
    import signal

    _, log = worker_node
    client = APIClient()
    client.force_authenticate(UserFactory())
    experiment_id = _submit(
        client,
        name="resumable",
        model="mlp",
        dataset="digits",
        max_restarts=2,
        hyperparameters='{"epochs": 6, "batch_size": 16}',
    )

    def epochs_done() -> int:
        return (
            Experiment.objects.get(pk=experiment_id)
            .trials.filter(metrics__name="val_accuracy")
            .count()
        )

    live.wait_for(lambda: epochs_done() >= 2, timeout=180, what="two epochs", log=log)
    pids = live.trial_task_pids(experiment_id)
    assert pids, "the trial process was not found"
    for pid in pids:
        os.kill(int(pid), signal.SIGKILL)
    live.wait_for(
        lambda: live.experiment_state(experiment_id) in ("completed", "failed"),
        timeout=240,
        what="the restarted experiment to finish",
        log=log,
    )
    experiment = Experiment.objects.get(pk=experiment_id)
    assert experiment.state == "completed", experiment.error
    trials = list(experiment.trials.order_by("restart_count"))
    assert [t.state for t in trials] == ["failed", "completed"]
    assert trials[0].retryable
    epochs = live.metric_epochs(client, experiment_id)
    assert epochs == list(range(1, 7)), epochs


def test_higher_priority_preempts_and_the_preempted_experiment_resumes(
    worker_node: tuple[str, Path],
) -> None:
    _, log = worker_node
    client = APIClient()
    client.force_authenticate(UserFactory())
    low = _submit(
        client,
        name="low",
        model="upload",
        model_file=paced_upload(),
        dataset="digits",
        priority=0,
        # Paced epochs of seconds: the run cannot end on its own in the moment between its
        # second epoch and the preemption.
        hyperparameters='{"epochs": 6}',
    )

    def epochs(experiment_id: int) -> list[int]:
        return live.metric_epochs(client, experiment_id)

    live.wait_for(lambda: len(epochs(low)) >= 2, timeout=180, what="two epochs", log=log)
    high = _submit(
        client,
        name="high",
        model="mlp",
        dataset="digits",
        priority=10,
        hyperparameters='{"epochs": 2}',
    )
    live.wait_for(
        lambda: live.experiment_state(high) == "completed",
        timeout=240,
        what="the urgent experiment",
        log=log,
    )
    live.wait_for(
        lambda: live.experiment_state(low) == "completed",
        timeout=240,
        what="the preempted experiment to resume and finish",
        log=log,
    )
    trials = Experiment.objects.get(pk=low).trials.order_by("restart_count")
    assert trials[0].stop_reason == "preempted"
    assert [t.state for t in trials] == ["canceled", "completed"]
    first_high = Experiment.objects.get(pk=high).trials.get().started_at
    assert trials[0].finished_at <= first_high  # the slot was given back before it started
    assert epochs(low) == list(range(1, 7))  # resumed from its checkpoint: no epoch twice
