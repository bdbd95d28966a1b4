"""An uploaded SavedModel is a program: one whose graph reads a file outside its version dir is
refused before the model server could load it, unless an operator allows that operation."""

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _thief_zip(tmp_path: Path) -> io.BytesIO:
    """A model whose init op (a lookup table's initializer) reads /etc/passwd."""
    import tensorflow as tf

    class Thief(tf.Module):
        def __init__(self) -> None:
            self.table = tf.lookup.StaticHashTable(
                tf.lookup.TextFileInitializer(
                    "/etc/passwd", tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
                    tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER),
                default_value=-1)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, words: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"line": self.table.lookup(words)}

    thief = Thief()
    tf.saved_model.save(thief, str(tmp_path / "thief"), signatures=thief.serve)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted((tmp_path / "thief").rglob("*")):
            if path.is_file():
                archive.write(path, str(path.relative_to(tmp_path / "thief")))
    buffer.seek(0)
    buffer.name = "thief.zip"
    return buffer


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
