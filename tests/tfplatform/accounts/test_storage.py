"""Each user's uploads and model versions share a storage quota, checked before anything more
is stored; undeploying a version gives its space back; staff are not limited."""

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.modelregistry.conftest import HALF_PLUS_TWO, api, register, saved_model_zip
from tfplatform.accounts.storage import MIB, storage_used
from tfplatform.experiments.models import Experiment
from tfplatform.modelregistry.models import ModelVersion

pytestmark = pytest.mark.django_db(transaction=True)

MODULE = b"""
import tf_keras as keras

def build_model(hparams):
    return keras.Sequential([keras.layers.Dense(10, activation="softmax")])
"""


def _padded_module(size: int) -> SimpleUploadedFile:
    padding = b"# " + b"x" * 78 + b"\n"
    return SimpleUploadedFile("model.py", MODULE + padding * (size // len(padding)))


def _submit(client: APIClient, size: int) -> Any:
    return client.post("/api/v1/experiments/", {
        "name": "padded", "model": "upload", "dataset": "digits",
        "hyperparameters": json.dumps({"epochs": 1}), "model_file": _padded_module(size),
    }, format="multipart")


def test_an_upload_past_the_quota_is_refused_before_it_is_stored(
    settings: Any, tmp_path: Path, platform_settings_override: PlatformSettingsOverride
) -> None:
    platform_settings_override(user_storage_quota_mb=1)
    settings.MEDIA_ROOT = tmp_path / "media"
    user = UserFactory()
    client = api(user)
    assert _submit(client, 600_000).status_code == 201
    assert 600_000 <= storage_used(user=user) < MIB

    refused = _submit(client, 600_000)
    assert refused.status_code == 413, refused.content
    assert "quota" in refused.json()["error"]
    assert Experiment.objects.filter(owner=user).count() == 1
    assert len(list((tmp_path / "media").rglob("*.py"))) == 1  # nothing more on disk

    # Another user's quota is their own; staff have none.
    assert _submit(api(UserFactory()), 600_000).status_code == 201
    staff = api(UserFactory(is_staff=True))
    assert all(_submit(staff, 600_000).status_code == 201 for _ in range(2))


def test_model_versions_count_and_undeploying_one_removes_its_files(
    model_server: dict[str, Any], settings: Any,
    platform_settings_override: PlatformSettingsOverride
) -> None:
    user = UserFactory()
    client = api(user)
    register(client, "kept")
    register(client, "kept")
    [first, second] = ModelVersion.objects.filter(model__name="kept").order_by("version")
    assert first.size_bytes > 0 and storage_used(user=user) == first.size_bytes * 2

    assert client.delete("/api/v1/models/kept/versions/2/").status_code == 200
    second.refresh_from_db()
    assert second.state == ModelVersion.State.UNLOADED and second.size_bytes == 0
    assert not Path(second.path).exists() and Path(first.path).is_dir()
    assert storage_used(user=user) == first.size_bytes

    platform_settings_override(user_storage_quota_mb=1)
    ModelVersion.objects.filter(pk=first.pk).update(size_bytes=MIB)  # as if it were large
    answer = client.post("/api/v1/models/", {"model_name": "more",
                                             "file": saved_model_zip(HALF_PLUS_TWO)},
                         format="multipart")
    assert answer.status_code == 413 and "quota" in answer.json()["error"]
    assert not (model_server["base"] / "more").exists()
