"""The embedded model server answers the platform only: a client on the same host without its
access token can neither predict on a private model nor reload the server's models."""

import stat
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


def test_the_token_reaches_the_server_by_a_file_of_its_owner_never_argv_or_environment(
    model_server: dict[str, Any],
) -> None:
    """Every local user can read a process's command line; a model the server runs can read its
    environment. The file is read at start, before the server confines itself."""
    token = settings.PLATFORM.tf_serving_access_token
    assert len(token) >= 32
    process = Path(f"/proc/{model_server['pid']}")
    command_line = (process / "cmdline").read_bytes()
    assert token.encode() not in command_line
    assert b"--grpc_channel_arguments=grpc.max_receive_message_length=67108864" in command_line
    environ = (process / "environ").read_bytes()
    assert token.encode() not in environ
    [named] = [entry for entry in environ.split(b"\0")
               if entry.startswith(b"TF_SERVING_ACCESS_TOKEN_FILE=")]
    token_file = Path(named.split(b"=", 1)[1].decode())
    assert token_file.read_text() == token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert not token_file.is_relative_to(settings.PLATFORM.model_base_path)
