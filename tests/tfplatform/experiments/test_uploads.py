import io
import json
from typing import Any

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.experiments.models import Experiment

pytestmark = pytest.mark.django_db

GOOD_MODULE = b"""
import tf_keras as keras

def build_model(hparams):
    return keras.Sequential([keras.layers.Dense(10, activation="softmax")])
"""


def post(files: dict[str, SimpleUploadedFile], **fields: object) -> object:
    client = APIClient()
    client.force_authenticate(UserFactory())
    data = {
        "name": "upload",
        "model": "mlp",
        "dataset": "digits",
        "hyperparameters": json.dumps({"epochs": 1}),
        **{k: json.dumps(v) if isinstance(v, dict) else v for k, v in fields.items()},
        **files,
    }
    return client.post("/api/v1/experiments/", data, format="multipart")


def npz_bytes(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_module_with_syntax_error_is_400_naming_the_line() -> None:
    broken = SimpleUploadedFile("model.py", b"def build_model(hparams):\n    return (\n")
    response = post({"model_file": broken}, model="upload")
    assert response.status_code == 400
    body = response.json()
    assert "SyntaxError" in body["model_file"][0] and "line" in body["model_file"][0]
    assert Experiment.objects.count() == 0


def test_module_without_build_model_is_400() -> None:
    response = post({"model_file": SimpleUploadedFile("m.py", b"x = 1\n")}, model="upload")
    assert response.status_code == 400
    assert "build_model" in response.json()["error"]


def test_valid_module_and_npz_upload_are_stored() -> None:
    rng = np.random.default_rng(0)
    data = npz_bytes(
        x_train=rng.random((20, 4)),
        y_train=rng.integers(0, 2, 20),
        x_test=rng.random((5, 4)),
        y_test=rng.integers(0, 2, 5),
    )
    response = post(
        {
            "model_file": SimpleUploadedFile("model.py", GOOD_MODULE),
            "dataset_file": SimpleUploadedFile("data.npz", data),
        },
        model="upload",
        dataset="upload",
        resources={"workers": 1},
    )
    assert response.status_code == 201, response.json()
    experiment = Experiment.objects.get()
    assert experiment.model_file.read() == GOOD_MODULE
    assert experiment.dataset_file.name.endswith(".npz")


def test_npz_with_mismatched_lengths_is_400() -> None:
    data = npz_bytes(
        x_train=np.zeros((20, 4)), y_train=np.zeros(19), x_test=np.zeros((5, 4)), y_test=np.zeros(5)
    )
    response = post({"dataset_file": SimpleUploadedFile("d.npz", data)}, dataset="upload")
    assert response.status_code == 400
    assert "dataset_file" in response.json()


def test_npz_missing_arrays_is_400() -> None:
    data = npz_bytes(x_train=np.zeros((2, 2)))
    response = post({"dataset_file": SimpleUploadedFile("d.npz", data)}, dataset="upload")
    assert response.status_code == 400
    assert "y_train" in response.json()["error"] or "x_test" in response.json()["error"]


def test_csv_without_label_column_named_is_400_and_with_bad_name_too() -> None:
    csv = SimpleUploadedFile("d.csv", b"a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n9,1,0\n")
    response = post({"dataset_file": csv}, dataset="upload")
    assert response.status_code == 400
    assert "label_column" in response.json()["error"]
    csv.seek(0)
    response = post(
        {"dataset_file": csv}, dataset="upload", hyperparameters={"label_column": "nope"}
    )
    assert response.status_code == 400
    assert "nope" in response.json()["error"]


def test_not_a_dataset_file_type_is_400() -> None:
    response = post({"dataset_file": SimpleUploadedFile("d.exe", b"MZ")}, dataset="upload")
    assert response.status_code == 400
    assert ".npz or .csv" in response.json()["error"]


def test_model_and_dataset_by_path_only_from_the_shared_folder(
    settings: Any, tmp_path: Any, platform_settings_override: PlatformSettingsOverride
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    platform_settings_override(shared_dir=shared)
    (shared / "model.py").write_bytes(GOOD_MODULE)
    (tmp_path / "outside.py").write_bytes(GOOD_MODULE)
    rng = np.random.default_rng(1)
    (shared / "data.npz").write_bytes(
        npz_bytes(
            x_train=rng.random((10, 3)),
            y_train=rng.integers(0, 2, 10),
            x_test=rng.random((4, 3)),
            y_test=rng.integers(0, 2, 4),
        )
    )
    client = APIClient()
    client.force_authenticate(UserFactory())
    body = {
        "name": "by path",
        "model": str(shared / "model.py"),
        "dataset": str(shared / "data.npz"),
    }
    assert client.post("/api/v1/experiments/", body, format="json").status_code == 201
    for model in (str(tmp_path / "outside.py"), f"{shared}/../outside.py", "/etc/passwd"):
        response = client.post("/api/v1/experiments/", {**body, "model": model}, format="json")
        assert response.status_code == 400, model
        assert "shared folder" in response.json()["model"][0]
