"""The model store's disk is full (a small tmpfs of the test's own over one model's folder): a
publish answers 507 with a JSON error and Retry-After, leaves no version (no row, no file the
model server could load), and the same publish succeeds once space is freed."""

from typing import Any

import pytest

from tests.disks import FILLER, disk_fill, disk_free, tmpfs_mounted
from tests.factories import UserFactory
from tests.tfplatform.modelregistry.conftest import HALF_PLUS_TWO, api, register, saved_model_zip
from tfplatform.modelregistry.models import ModelVersion

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_publish_on_a_full_disk_is_a_507_leaves_no_version_and_succeeds_after(
    model_server: dict[str, Any],
) -> None:
    folder = model_server["base"] / "crowded"
    with tmpfs_mounted(path=folder, megabytes=1):
        disk_fill(path=folder)
        client = api(UserFactory())
        answer = client.post("/api/v1/models/", {"model_name": "crowded",
                                                 "file": saved_model_zip(HALF_PLUS_TWO)},
                             format="multipart")
        assert answer.status_code == 507, answer.content
        assert answer.json()["code"] == "insufficient_storage"
        assert "out of disk space" in answer.json()["error"]
        assert int(answer["Retry-After"]) > 0
        assert [p.name for p in folder.iterdir()] == [FILLER]  # no staging copy, no number
        assert not ModelVersion.objects.filter(model__name="crowded").exists()

        disk_free(path=folder)
        published = register(client, "crowded")
        assert (published["version"], published["state"]) == (1, "available")
