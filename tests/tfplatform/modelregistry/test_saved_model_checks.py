"""An uploaded SavedModel is a program: one whose graph reads a file outside its version dir is
refused before the model server could load it, unless an operator allows that operation."""

import io
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.crafted_models import directory_zip, file_table_model, saved_model_save
from tests.factories import UserFactory

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
    assert answer.status_code == 201, answer.content
