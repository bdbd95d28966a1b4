"""A regression module through the platform: its own loss, a minimised target, its own signature.

It trains on a live worker until val_mae is at or below the target, deploys, and answers over REST
exactly what the Keras model answers; the model page and the API show the signature it exported.
"""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import UserFactory
from tests.tfplatform.modelregistry.conftest import experiment_trained, version_loaded
from tfplatform.experiments.models import Experiment
from tfplatform.modelregistry.services.publish import experiment_export_dir

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MODULE = (Path(__file__).resolve().parents[3] / "examples" / "regression.py").read_bytes()


def test_regression_reaches_its_target_deploys_and_predicts_like_keras(
    worker_node: tuple[str, Path], model_server: dict[str, Any], tmp_path: Path
) -> None:
    _, log = worker_node
    owner = UserFactory()
    client = APIClient()
    client.force_authenticate(owner)
    experiment = experiment_trained(
        client, log=log, module_name="regression.py", module=MODULE, name="regression",
        hyperparameters=json.dumps({"epochs": 40, "batch_size": 32, "stop_at_target": True}),
        target=json.dumps({"metric": "val_mae", "mode": "min", "value": 0.5}),
    )
    experiment_id = experiment.pk
    target = client.get(f"/api/v1/experiments/{experiment_id}/").json()["target"]
    assert target == {"metric": "val_mae", "mode": "min", "value": 0.5}
    results = client.get(f"/api/v1/experiments/{experiment_id}/").json()["results"]
    assert results["time_to_target_seconds"] is not None
    assert results["best_metric"] == "val_mae" and results["best_value"] <= 0.5
    assert results["epochs_completed"] < 40
    mae = client.get(f"/api/v1/experiments/{experiment_id}/metrics/?name=val_mae").json()
    assert mae[-1]["value"] <= 0.5

    deployed = client.post(f"/api/v1/experiments/{experiment_id}/deploy/",
                           {"model_name": "regressor"}, format="json")
    assert deployed.status_code == 202, deployed.content
    assert version_loaded(client, "regressor", 1)["state"] == "available"
    signature = {"inputs": {"inputs": {"dtype": "float32", "shape": [-1, 8]}},
                 "outputs": {"outputs": {"dtype": "float32", "shape": [-1, 1]}}}
    model = client.get("/api/v1/models/regressor/").json()
    assert model["versions"][0]["signatures"] == {"serving_default": signature}

    rows = np.random.default_rng(7).normal(size=(12, 8)).astype("float32")
    answer = client.post("/api/v1/models/regressor:predict",
                         data=json.dumps({"instances": rows.tolist()}),
                         content_type="application/json")
    assert answer.status_code == 200, answer.content
    predicted = np.array(answer.json()["predictions"])
    np.testing.assert_allclose(predicted, _keras_predict(experiment=experiment, rows=rows,
                                                         tmp_path=tmp_path), atol=1e-5)

    page = Client()
    page.force_login(owner)
    html = page.get("/models/regressor/").content.decode()
    assert 'id="signature"' in html and "<code>outputs</code>" in html and "(-1, 8)" in html


def _keras_predict(*, experiment: Experiment, rows: np.ndarray, tmp_path: Path) -> np.ndarray:
    """The trained Keras model's answers: the module's architecture, the final checkpoint."""
    from training.trial.modelling import user_module_load
    from training.trial.tfenv import tf

    path = tmp_path / "regression.py"
    path.write_bytes(MODULE)
    model = user_module_load(path=str(path)).build_model({"input_shape": [8]})
    export = experiment_export_dir(experiment=experiment)
    latest = tf.train.latest_checkpoint(str(Path(export).parent / "checkpoints"))
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    return np.asarray(model.predict(rows, verbose=0))
