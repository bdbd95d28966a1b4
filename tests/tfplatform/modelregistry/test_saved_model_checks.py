"""An uploaded SavedModel is a program: one whose graph reads a file outside its version dir is
refused before the model server could load it, unless an operator allows that operation."""

import io
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.crafted_models import (
    directory_zip,
    file_read_model,
    file_table_model,
    saved_model_save,
)
from tests.factories import UserFactory
from tests.tfplatform.modelregistry.conftest import version_loaded

pytestmark = pytest.mark.django_db(transaction=True)


def _thief_zip(tmp_path: Path) -> io.BytesIO:
    path = saved_model_save(file_table_model(), tmp_path / "thief")
    return directory_zip(path, name="thief.zip")


def test_a_model_that_reads_files_at_init_is_refused_and_never_published(
    model_server: dict[str, Any], tmp_path: Path
) -> None:
    client = APIClient()
    client.force_authenticate(UserFactory())
    answer = client.post("/api/v1/models/", {"model_name": "thief",
                                             "file": _thief_zip(tmp_path)}, format="multipart")
    assert answer.status_code == 400, answer.content
    assert "InitializeTableFromTextFileV2" in answer.json()["error"]
    published = model_server["base"] / "thief"
    assert not published.exists() or not any(published.iterdir())


def test_an_operator_may_allow_an_operation(
    model_server: dict[str, Any], tmp_path: Path, settings: Any
) -> None:
    settings.PLATFORM = {**settings.PLATFORM,
                         "MODEL_ALLOWED_OPS": ["InitializeTableFromTextFileV2"]}
    client = APIClient()
    client.force_authenticate(UserFactory())
    answer = client.post("/api/v1/models/", {"model_name": "allowed",
                                             "file": _thief_zip(tmp_path)}, format="multipart")
    assert answer.status_code == 202, answer.content


def test_a_model_the_check_let_through_still_reads_nothing_outside_the_model_base_path(
    model_server: dict[str, Any], tmp_path: Path, settings: Any
) -> None:
    """The second wall: the embedded server is confined (Landlock) to the model base path, so a
    file-reading op an operator allowed gets nothing of the platform's (here: a secret beside
    var/), while the same op reading inside the base path works."""
    settings.PLATFORM = {**settings.PLATFORM, "MODEL_ALLOWED_OPS": ["ReadFile"]}
    secret = tmp_path / "secret_key"
    secret.write_text("the-platform-secret")
    inside = model_server["base"].parent / f"{tmp_path.name}-words.txt"
    inside.write_text("a-public-word")
    client = APIClient()
    client.force_authenticate(UserFactory())

    def read_through(name: str, path: Path) -> Any:
        model = saved_model_save(file_read_model(str(path)), tmp_path / name)
        upload = client.post("/api/v1/models/", {
            "model_name": name, "file": directory_zip(model, name=f"{name}.zip")},
            format="multipart")
        assert upload.status_code == 202, upload.content
        version_loaded(client, name, 1)
        return client.post(f"/api/v1/models/{name}:predict", data='{"instances": [1.0]}',
                           content_type="application/json")

    control = read_through("words", inside)
    assert control.status_code == 200, control.content
    assert control.json()["predictions"] == ["a-public-word"]  # the op itself works

    stolen = read_through("stealer", secret)
    assert "the-platform-secret" not in stolen.content.decode()
    assert stolen.status_code == 403, stolen.content  # TF Serving's PERMISSION_DENIED
    assert "Permission denied" in stolen.json()["error"]
