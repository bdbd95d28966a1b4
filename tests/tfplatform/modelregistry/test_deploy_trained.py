"""Train a tiny model through the platform, deploy it, predict over every protocol."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from django.conf import settings
from rest_framework.test import APIClient

from serving.client import ModelServerClient
from tests.factories import UserFactory
from tests.tfplatform.modelregistry.conftest import experiment_trained, version_loaded
from tfplatform.modelregistry.services.publish import experiment_export_dir

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MODULE = b"""
import tf_keras as keras


def build_model(hparams):
    return keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        keras.layers.Rescaling(1.0 / 16.0),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(hparams["num_classes"], activation="softmax"),
    ])
"""


def test_trained_model_deploys_and_answers_like_keras_everywhere(
    worker_node: tuple[str, Path], model_server: dict[str, Any], tmp_path: Path
) -> None:
    _, log = worker_node
    owner = UserFactory()
    client = APIClient()
    client.force_authenticate(owner)
    experiment = experiment_trained(
        client, log=log, module_name="digits_model.py", module=MODULE, name="deployable",
        hyperparameters=json.dumps({"epochs": 3, "batch_size": 32, "learning_rate": 0.01}),
    )
    experiment_id = experiment.pk
    results = client.get(f"/api/v1/experiments/{experiment_id}/").json()["results"]
    assert results["exported"] is True
    # Nothing of the node's file layout in what the API shows.
    assert str(settings.PLATFORM.work_dir) not in json.dumps(results)
    assert not {"export_path", "attempt_dir", "best_checkpoint_path"} & set(results)

    stranger = APIClient()
    stranger.force_authenticate(UserFactory())
    assert (
        stranger.post(
            f"/api/v1/experiments/{experiment_id}/deploy/", {"model_name": "digits"}, format="json"
        ).status_code
        == 404
    )
    deployed = client.post(
        f"/api/v1/experiments/{experiment_id}/deploy/", {"model_name": "digits"}, format="json"
    )
    assert deployed.status_code == 202, deployed.content
    assert deployed.json()["state"] == "loading" and deployed.json()["version"] == 1
    assert version_loaded(client, "digits", 1)["state"] == "available"
    assert (model_server["base"] / "digits" / "1" / "saved_model.pb").is_file()

    from sklearn.datasets import load_digits

    pixels = load_digits().data[:16].astype("float32")  # raw 0..16 values, no client scaling
    expected = keras_outputs(
        module=MODULE, export=str(experiment_export_dir(experiment=experiment)), pixels=pixels,
        tmp_path=tmp_path,
    )

    platform = client.post(
        "/api/v1/models/digits:predict",
        data=json.dumps({"instances": pixels.tolist()}),
        content_type="application/json",
    )
    assert platform.status_code == 200, platform.content
    assert platform["X-Model-Version"] == "1"
    from_platform = np.array([row["probabilities"] for row in platform.json()["predictions"]])
    np.testing.assert_allclose(from_platform, expected, atol=1e-5)
    assert [row["class_id"] for row in platform.json()["predictions"]] == list(
        expected.argmax(axis=1)
    )

    direct = requests.post(
        f"{model_server['rest']}/v1/models/digits:predict",
        json={"inputs": pixels.tolist()},
        headers=model_server["headers"],
        timeout=30,
    ).json()
    np.testing.assert_allclose(np.array(direct["outputs"]["probabilities"]), expected, atol=1e-5)

    grpc_client = ModelServerClient(
        grpc_target=model_server["grpc"], rest_url=model_server["rest"],
        access_token=settings.PLATFORM.tf_serving_access_token,
    )
    try:
        over_grpc = grpc_client.predict(name="digits", inputs={"inputs": pixels})
        metadata = grpc_client.metadata(name="digits")
    finally:
        grpc_client.close()
    np.testing.assert_allclose(over_grpc["probabilities"], expected, atol=1e-5)
    signature = metadata.signatures["serving_default"]
    assert set(signature.inputs) == {"inputs"}
    assert set(signature.outputs) == {"probabilities", "class_id"}

    wrong = client.post(
        "/api/v1/models/digits:predict",
        data=json.dumps({"instances": [[1.0, 2.0]]}),
        content_type="application/json",
    )
    assert wrong.status_code == 400
    assert "error" in wrong.json()


def keras_outputs(*, module: bytes, export: str, pixels: np.ndarray, tmp_path: Path) -> np.ndarray:
    """The trained Keras model's own answers: same architecture, final checkpoint restored."""
    from training.trial.modelling import user_module_load
    from training.trial.tfenv import tf

    path = tmp_path / "digits_model.py"
    path.write_bytes(module)
    model = user_module_load(path=str(path)).build_model({"input_shape": [64], "num_classes": 10})
    latest = tf.train.latest_checkpoint(str(Path(export).parent / "checkpoints"))
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    return np.asarray(model.predict(pixels, verbose=0))
