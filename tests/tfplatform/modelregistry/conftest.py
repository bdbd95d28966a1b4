"""Uploads of TF Serving's own test SavedModels, as a user would send them, and the API calls
the registry tests make with them."""

import io
import json
import time
import zipfile
from pathlib import Path
from typing import Any

from rest_framework.test import APIClient

from tests.conftest import peer_data_or_skip

HALF_PLUS_TWO = "saved_model_half_plus_two_cpu"
HALF_PLUS_THREE = "saved_model_half_plus_three"
LOAD_WAIT_SECONDS = 120.0


def saved_model_zip(name: str, *, top_folder: str = "") -> io.BytesIO:
    """A zip of one of TF Serving's test SavedModels, as a user would upload it."""
    source = peer_data_or_skip() / "tf-serving-testdata" / name / "00000123"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                archive.write(path, str(Path(top_folder) / path.relative_to(source)))
    buffer.seek(0)
    buffer.name = f"{name}.zip"
    return buffer


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def register(client: APIClient, name: str, source: str = HALF_PLUS_TWO) -> dict[str, Any]:
    """Uploads and waits for the model loader: the version as loaded (or failed)."""
    response = client.post(
        "/api/v1/models/", {"model_name": name, "file": saved_model_zip(source)}, format="multipart"
    )
    assert response.status_code == 202, response.content
    assert response.json()["state"] == "loading"
    return version_loaded(client, name, response.json()["version"])


def version_loaded(client: APIClient, name: str, version: int,
                   timeout: float = LOAD_WAIT_SECONDS) -> dict[str, Any]:
    """The version's entry once the loader is done with it (state no longer `loading`)."""
    deadline = time.monotonic() + timeout
    while True:
        model = client.get(f"/api/v1/models/{name}/")
        assert model.status_code == 200, model.content
        [entry] = [v for v in model.json()["versions"] if v["version"] == version]
        if entry["state"] != "loading":
            return {**entry, "model_name": name, "labels": [
                label for label, v in model.json()["labels"].items() if v == version]}
        assert time.monotonic() < deadline, f"{name} v{version} still loading"
        time.sleep(0.1)


def experiment_trained(client: APIClient, *, log: Path, module_name: str, module: bytes,
                       **fields: Any) -> Any:
    """An experiment of an uploaded module, submitted through the API and trained to the end
    by the live worker node; fields are the form's (JSON objects as JSON text)."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from tests import live
    from tfplatform.experiments.models import Experiment

    created = client.post(
        "/api/v1/experiments/",
        {"model": "upload", "dataset": "digits",
         "model_file": SimpleUploadedFile(module_name, module), **fields},
        format="multipart",
    )
    assert created.status_code == 201, created.content
    experiment_id = created.json()["id"]
    live.wait_for(
        lambda: Experiment.objects.get(pk=experiment_id).state in ("completed", "failed"),
        timeout=240, what="training", log=log,
    )
    experiment = Experiment.objects.get(pk=experiment_id)
    assert experiment.state == "completed", experiment.error
    return experiment


def predict(client: APIClient, url: str, body: Any) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body)
    return client.post(url, data=data, content_type="application/json")
