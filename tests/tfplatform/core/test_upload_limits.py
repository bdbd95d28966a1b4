"""A multipart body over the limit is refused while it is read (413), whatever length it
declares, and a form field over Django's limit is a 413 too, not a 500."""

import io
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride

pytestmark = pytest.mark.django_db

LIMIT = 64 * 1024


@pytest.fixture
def client(settings: Any, platform_settings_override: PlatformSettingsOverride) -> APIClient:
    platform_settings_override(max_upload_bytes=LIMIT)
    made = APIClient()
    made.force_authenticate(UserFactory())
    return made


def test_an_upload_over_the_limit_is_refused_before_it_is_stored(client: APIClient) -> None:
    big = io.BytesIO(b"\0" * (LIMIT * 40))  # past the memory handler's 2.5 MB, too
    big.name = "big.zip"
    answer = client.post("/api/v1/models/", {"model_name": "big", "file": big},
                         format="multipart")
    assert answer.status_code == 413
    assert "larger than" in answer.json()["error"]


def test_a_body_of_unknown_length_is_counted_and_cut_off(settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    """Chunked requests declare no length: the bytes that arrive are what is counted."""
    from django.core.exceptions import RequestDataTooBig

    from tfplatform.core.uploads import BoundedUploadHandler

    platform_settings_override(max_upload_bytes=LIMIT)
    handler = BoundedUploadHandler()
    handler.handle_raw_input(None, {}, 0, b"boundary")
    assert handler.receive_data_chunk(b"x" * LIMIT, 0) == b"x" * LIMIT
    with pytest.raises(RequestDataTooBig):
        handler.receive_data_chunk(b"x", LIMIT)


def test_a_form_field_over_djangos_limit_is_a_413(client: APIClient, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    answer = client.post("/api/v1/experiments/", {"name": "x" * 4096, "model": "mlp",
                                                  "dataset": "digits"}, format="multipart")
    assert answer.status_code == 413 and "error" in answer.json()
