"""A version published with `tflite` gets a model.tflite from the confined converter, and the
platform's model server (started as serve_models starts it, --prefer_tflite_model) serves it;
a SavedModel that brings its own .tflite, or one the converter cannot convert, is refused."""

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
import tensorflow as tf
from django.test import Client

from tests.factories import ExperimentFactory
from tests.tfplatform.modelregistry.conftest import (
    HALF_PLUS_TWO,
    api,
    predict,
    saved_model_zip,
    version_loaded,
)
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.execution import experiment_work_dir
from tfplatform.modelregistry.models import ModelVersion, RegisteredModel

pytestmark = pytest.mark.django_db(transaction=True)


class HalfPlusTwo(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")])
    def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": 0.5 * x + 2.0}


def half_plus_two(path: Path) -> Path:
    module = HalfPlusTwo()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return path


def zipped(folder: Path, extra: dict[str, bytes] | None = None) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, str(path.relative_to(folder)))
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    buffer.seek(0)
    buffer.name = "model.zip"
    return buffer


def upload(client: Any, name: str, archive: io.BytesIO, tflite: bool) -> Any:
    return client.post("/api/v1/models/", {"model_name": name, "file": archive,
                                           "tflite": tflite}, format="multipart")


def test_upload_with_tflite_is_served_from_its_conversion(
    model_server: dict[str, Any], tmp_path: Path
) -> None:
    owner = ExperimentFactory().owner
    client = api(owner)
    response = upload(client, "lite", zipped(half_plus_two(tmp_path / "sm")), tflite=True)
    assert response.status_code == 202, response.content
    assert response.json()["tflite"] is True
    loaded = version_loaded(client, "lite", 1)
    assert loaded["state"] == "available", loaded
    assert loaded["tflite"] is True
    assert (model_server["base"] / "lite" / "1" / "model.tflite").is_file()
    answer = predict(client, "/api/v1/models/lite:predict", {"instances": [[1.0], [2.0], [5.0]]})
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"predictions": [[2.5], [3.0], [4.5]]}
    assert "Serving lite version 1 from its TF Lite model" in model_server["log"].read_text()


def test_tflite_is_refused_when_brought_or_not_convertible(
    model_server: dict[str, Any], tmp_path: Path
) -> None:
    client = api(ExperimentFactory().owner)
    brought = upload(client, "own", zipped(half_plus_two(tmp_path / "sm"),
                                           {"model.tflite": b"TFL3 anything"}), tflite=False)
    assert brought.status_code == 400
    assert "must not contain model.tflite" in brought.json()["error"]
    # TF Serving's own half_plus_two is a TF1 graph the converter cannot take.
    refused = upload(client, "tf1", saved_model_zip(HALF_PLUS_TWO), tflite=True)
    assert refused.status_code == 400
    assert "cannot be converted to TF Lite" in refused.json()["error"]
    assert not RegisteredModel.objects.filter(name="tf1", versions__isnull=False).exists()
    assert not (model_server["base"] / "tf1" / "1").exists()
    # Without the option the same model is published as before.
    plain = upload(client, "tf1", saved_model_zip(HALF_PLUS_TWO), tflite=False)
    assert plain.status_code == 202 and plain.json()["tflite"] is False


def test_deploy_form_checkbox_asks_for_tflite(
    model_server: dict[str, Any], tmp_path: Path
) -> None:
    experiment = ExperimentFactory(state=Experiment.State.COMPLETED, results={"exported": True})
    half_plus_two(experiment_work_dir(experiment_id=experiment.pk) / "export")
    browser = Client()
    browser.force_login(experiment.owner)
    page = browser.get(f"/experiments/{experiment.pk}/")
    assert b'name="tflite"' in page.content
    response = browser.post(f"/experiments/{experiment.pk}/deploy/",
                            {"model_name": "formlite", "tflite": "on"})
    assert response.status_code == 302
    version = ModelVersion.objects.get(model__name="formlite")
    assert version.tflite
    assert (Path(version.path) / "model.tflite").is_file()
    assert version_loaded(api(experiment.owner), "formlite", 1)["state"] == "available"
