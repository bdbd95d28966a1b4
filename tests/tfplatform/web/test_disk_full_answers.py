"""A write no service expected to fail (an upload's file) meets a full disk: the answer is a
507 with a JSON error under /api/ and the error page elsewhere, never a 500; nothing is kept."""

from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from tests.disks import FILLER, disk_fill, tmpfs_mounted
from tests.factories import UserFactory
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.submission import uploads_leftovers_remove

pytestmark = pytest.mark.django_db

MODULE = b"""
import tf_keras as keras


def build_model(hparams):
    return keras.Sequential([keras.Input(shape=hparams["input_shape"]),
                             keras.layers.Dense(hparams["num_classes"], activation="softmax")])
""" + b"# padding\n" * 2000


def test_an_upload_that_meets_a_full_disk_is_a_507_with_a_json_error(
    settings: Any, tmp_path: Path
) -> None:
    with tmpfs_mounted(path=tmp_path / "media", megabytes=1) as media:
        settings.MEDIA_ROOT = media
        disk_fill(path=media)
        client = APIClient(raise_request_exception=False)
        client.force_authenticate(UserFactory())
        module = SimpleUploadedFile("net.py", MODULE)
        answer = client.post("/api/v1/experiments/", {
            "name": "no room", "model": "upload", "model_file": module, "dataset": "digits"},
            format="multipart")
        assert answer.status_code == 507, answer.content
        assert answer.json()["code"] == "insufficient_storage"
        assert not Experiment.objects.exists()
        # What the storage wrote before the disk ran out is nobody's: the sweep takes it.
        uploads_leftovers_remove(older_than=0)
        assert [p.name for p in media.rglob("*") if p.is_file()] == [FILLER]
