"""The access token of the embedded model server, and its gRPC message cap: every call on both
ports, reload included, is refused without the token; the same client code works with it."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
from tensorflow_serving.apis import (
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from serving.access import access_token_file_write
from serving.client import ModelEntry, ModelServerClient, ModelServerError
from serving.config import single_model_config
from serving.flags import channel_arguments_parse, options_from_args, parser
from serving.server import ModelServer
from serving.tensors import to_proto

TOKEN = "a-token-only-the-platform-knows"


@pytest.fixture
def guarded(model_base: Path, start_server: Callable[..., ModelServer]) -> ModelServer:
    config = single_model_config(name="private", base_path=str(model_base / "half_plus_two"))
    return start_server(config=config, access_token=TOKEN)


def _predict_request() -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "private"
    request.inputs["x"].CopyFrom(to_proto(np.array([1.0, 2.0], dtype=np.float32)))
    return request


@pytest.mark.parametrize("metadata", [None, (("authorization", "Bearer wrong"),),
                                      (("authorization", TOKEN),)])
def test_grpc_predict_and_reload_without_the_token_are_refused(
    guarded: ModelServer, metadata: tuple[tuple[str, str], ...] | None
) -> None:
    with grpc.insecure_channel(guarded.grpc_target) as channel:
        predict = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict
        with pytest.raises(grpc.RpcError) as refused:
            predict(_predict_request(), timeout=10, metadata=metadata)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

        empty = model_management_pb2.ReloadConfigRequest()
        empty.config.model_config_list.SetInParent()  # would unload every model
        reload = model_service_pb2_grpc.ModelServiceStub(channel).HandleReloadConfigRequest
        with pytest.raises(grpc.RpcError) as refused:
            reload(empty, timeout=10, metadata=metadata)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with ModelServerClient(grpc_target=guarded.grpc_target, rest_url=guarded.rest_url,
                           access_token=TOKEN) as client:
        assert client.model_status(name="private").available == (123,)  # still served


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": f"Basic {TOKEN}"}])
def test_rest_calls_without_the_token_get_401_before_their_body_is_read(
    guarded: ModelServer, headers: dict[str, str]
) -> None:
    base = f"{guarded.rest_url}/v1/models/private"
    status = requests.get(base, headers=headers, timeout=10)
    assert status.status_code == 401
    assert "access token" in status.json()["error"]
    predict = requests.post(f"{base}:predict", json={"instances": [1.0]}, headers=headers,
                            timeout=10)
    assert predict.status_code == 401
    assert "predictions" not in predict.json()


def test_the_client_with_the_token_uses_both_ports(guarded: ModelServer, model_base: Path
                                                   ) -> None:
    with ModelServerClient(grpc_target=guarded.grpc_target, rest_url=guarded.rest_url,
                           access_token=TOKEN) as client:
        over_grpc = client.predict(name="private", inputs={"x": np.array([2.0], np.float32)})
        assert over_grpc["y"].tolist() == [3.0]
        status, body = client.predict_rest(name="private", body=b'{"instances": [4.0]}')
        assert (status, json.loads(body)) == (200, {"predictions": [4.0]})
        client.reload_config(models=[ModelEntry("renamed", str(model_base / "half_plus_two"))])
        client.wait_available(name="renamed", version=123, timeout=60)
    answer = requests.get(f"{guarded.rest_url}/v1/models/renamed", timeout=10,
                          headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.json()["model_version_status"][0]["state"] == "AVAILABLE"


def test_a_grpc_message_over_the_cap_is_refused(
    model_base: Path, start_server: Callable[..., ModelServer]
) -> None:
    config = single_model_config(name="capped", base_path=str(model_base / "half_plus_two"))
    server = start_server(config=config, grpc_channel_arguments=channel_arguments_parse(
        "grpc.max_receive_message_length=4096"))
    with ModelServerClient(grpc_target=server.grpc_target, rest_url=server.rest_url) as client:
        assert client.predict(name="capped", inputs={"x": np.ones(8, np.float32)})["y"].size == 8
        with pytest.raises(ModelServerError) as refused:
            client.predict(name="capped", inputs={"x": np.ones(10_000, np.float32)})
        assert refused.value.code == "RESOURCE_EXHAUSTED"


def test_the_token_may_come_from_a_file_of_the_owners_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The platform's way: the server's environment then names the file, not the token."""
    path = tmp_path / "token"
    access_token_file_write(path=str(path), token=TOKEN)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    monkeypatch.delenv("TF_SERVING_ACCESS_TOKEN", raising=False)
    monkeypatch.setenv("TF_SERVING_ACCESS_TOKEN_FILE", str(path))
    args = parser().parse_args(["--model_base_path=/nowhere", "--rest_api_port=0"])
    assert options_from_args(args)[0].access_token == TOKEN
    path.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        options_from_args(args)


def test_flags_read_channel_arguments_and_the_token_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert channel_arguments_parse("grpc.max_receive_message_length=64, grpc.x=y") == (
        ("grpc.max_receive_message_length", 64), ("grpc.x", "y"))
    with pytest.raises(ValueError, match="key=value"):
        channel_arguments_parse("grpc.max_receive_message_length")
    monkeypatch.setenv("TF_SERVING_ACCESS_TOKEN", TOKEN)
    args = parser().parse_args(["--model_base_path=/nowhere", "--rest_api_port=0",
                                "--grpc_channel_arguments=grpc.max_receive_message_length=9"])
    options, _ = options_from_args(args)
    assert options.access_token == TOKEN
    assert options.grpc_channel_arguments == (("grpc.max_receive_message_length", 9),)
    assert TOKEN not in repr(options)  # never in a log line
