"""The embedded model server answers the platform only: a client on the same host without its
access token can neither predict on a private model nor reload the server's models."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.conf import settings

from serving.client import ModelEntry, ModelServerClient, ModelServerError
from tests.factories import UserFactory
from tests.tfplatform.modelregistry.conftest import api, predict, register

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_client_on_the_host_without_the_token_is_refused(model_server: dict[str, Any]) -> None:
    owner = api(UserFactory())
    register(owner, "secret-model")
    url = "/api/v1/models/secret-model:predict"
    assert predict(owner, url, {"instances": [1.0]}).json() == {"predictions": [2.5]}

    with ModelServerClient(grpc_target=model_server["grpc"],
                           rest_url=model_server["rest"]) as stranger:
        with pytest.raises(ModelServerError) as refused:
            stranger.predict(name="secret-model", inputs={"x": np.array([1.0], np.float32)})
        assert refused.value.code == "UNAUTHENTICATED"
        status, _ = stranger.predict_rest(name="secret-model", body=b'{"instances": [1.0]}')
        assert status == 401
        with pytest.raises(ModelServerError) as refused:  # would point the name elsewhere
            stranger.reload_config(models=[ModelEntry("secret-model", "/tmp")])
        assert refused.value.code == "UNAUTHENTICATED"

    assert predict(owner, url, {"instances": [3.0]}).json() == {"predictions": [3.5]}


def test_the_token_reaches_the_server_by_its_environment_never_its_command_line(
    model_server: dict[str, Any],
) -> None:
    token = settings.PLATFORM["TF_SERVING_ACCESS_TOKEN"]
    assert len(token) >= 32
    process = Path(f"/proc/{model_server['pid']}")
    command_line = (process / "cmdline").read_bytes()
    assert token.encode() not in command_line  # every local user can read this
    assert b"--grpc_channel_arguments=grpc.max_receive_message_length=67108864" in command_line
    assert f"TF_SERVING_ACCESS_TOKEN={token}".encode() in (process / "environ").read_bytes().split(
        b"\0")
