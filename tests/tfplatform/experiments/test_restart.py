"""Restart: a finished experiment runs again as a new one, same configuration, same uploads."""

import io
import json

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from tests.factories import ExperimentFactory, TeamFactory, UserFactory
from tfplatform.core.errors import InvalidInput
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.submission import experiment_restart
from tfplatform.experiments.services.transitions import experiment_transition

pytestmark = pytest.mark.django_db

MODULE = b"""
import tf_keras as keras

def build_model(hparams):
    return keras.Sequential([keras.layers.Dense(hparams["num_classes"], activation="softmax")])
"""


def client_for(user: object) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    return client


def finish(experiment_id: int, state: str = "completed") -> Experiment:
    experiment = Experiment.objects.get(pk=experiment_id)
    for step in ("scheduled", "running"):
        experiment = experiment_transition(experiment=experiment, to=step)
    return experiment_transition(experiment=experiment, to=state, strategy="default")


def npz() -> bytes:
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    np.savez(
        buffer,
        x_train=rng.random((20, 4), dtype=np.float32),
        y_train=rng.integers(0, 3, 20),
        x_test=rng.random((8, 4), dtype=np.float32),
        y_test=rng.integers(0, 3, 8),
    )
    return buffer.getvalue()


def submitted_with_uploads(owner: object) -> int:
    response = client_for(owner).post(
        "/api/v1/experiments/",
        {
            "name": "my own model",
            "model": "upload",
            "dataset": "upload",
            "model_file": SimpleUploadedFile("net.py", MODULE),
            "dataset_file": SimpleUploadedFile("points.npz", npz()),
            "hyperparameters": json.dumps({"epochs": 2, "batch_size": 4}),
            "resources": json.dumps({"workers": 2, "gpus_per_worker": 0}),
            "target_accuracy": 0.6,
            "priority": 7,
            "max_restarts": 1,
        },
        format="multipart",
    )
    assert response.status_code == 201, response.json()
    return int(response.json()["id"])


def test_owner_restarts_with_the_same_configuration_and_uploads() -> None:
    owner = UserFactory()
    original = finish(submitted_with_uploads(owner), state="failed")
    response = client_for(owner).post(f"/api/v1/experiments/{original.pk}/restart/")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (
        body["id"] != original.pk and body["state"] == "queued" and body["owner"] == owner.username
    )
    assert body["trials"] == [] and body["strategy"] == ""
    again = Experiment.objects.get(pk=body["id"])
    fields = (
        "name",
        "model",
        "dataset",
        "hyperparameters",
        "workers",
        "gpus_per_worker",
        "parameter_servers",
        "priority",
        "target_metric",
        "target_mode",
        "target_value",
        "max_restarts",
        "environment",
    )
    assert {f: getattr(again, f) for f in fields} == {f: getattr(original, f) for f in fields}
    # Copies of the uploads, under the new experiment's own names.
    assert again.model_file.read() == MODULE and again.model_file.name != original.model_file.name
    assert again.dataset_file.read() == original.dataset_file.read()
    assert again.dataset_file.name.rsplit("/", 1)[1].startswith(f"{again.pk}-points")
    original.refresh_from_db()
    assert original.state == "failed"  # the finished one is left as it was


def test_another_user_gets_404_and_nothing_is_created() -> None:
    experiment = finish(ExperimentFactory().pk)
    response = client_for(UserFactory()).post(f"/api/v1/experiments/{experiment.pk}/restart/")
    assert response.status_code == 404 and "error" in response.json()
    assert Experiment.objects.count() == 1
    assert APIClient().post(f"/api/v1/experiments/{experiment.pk}/restart/").status_code in (
        401,
        403,
    )


@pytest.mark.parametrize("state", ["queued", "scheduled", "running"])
def test_an_active_experiment_cannot_be_restarted(state: str) -> None:
    experiment = ExperimentFactory()
    for step in ("scheduled", "running")[: ("queued", "scheduled", "running").index(state)]:
        experiment = experiment_transition(experiment=experiment, to=step)
    response = client_for(experiment.owner).post(f"/api/v1/experiments/{experiment.pk}/restart/")
    assert response.status_code == 400
    assert response.json()["error"] == (
        f"Only a finished experiment can be restarted; this one is {state}."
    )
    assert Experiment.objects.count() == 1


def test_a_team_mate_restarts_it_as_their_own() -> None:
    team = TeamFactory()
    owner, mate = UserFactory(team=team), UserFactory(team=team)
    experiment = finish(ExperimentFactory(owner=owner).pk, state="canceled")
    response = client_for(mate).post(f"/api/v1/experiments/{experiment.pk}/restart/")
    assert response.status_code == 201
    assert Experiment.objects.get(pk=response.json()["id"]).owner == mate


def test_an_upload_no_longer_stored_is_a_clear_400() -> None:
    owner = UserFactory()
    original = finish(submitted_with_uploads(owner))
    original.dataset_file.storage.delete(original.dataset_file.name)
    with pytest.raises(InvalidInput) as error:
        experiment_restart(user=owner, experiment=original)
    assert error.value.field == "dataset_file"
    response = client_for(owner).post(f"/api/v1/experiments/{original.pk}/restart/")
    assert response.status_code == 400
    assert "no longer stored" in response.json()["dataset_file"][0]
    assert Experiment.objects.count() == 1


def test_the_restart_endpoint_is_in_the_openapi_schema() -> None:
    schema = APIClient().get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/experiments/{experiment_id}/restart/"]["post"]
    assert "201" in operation["responses"]
