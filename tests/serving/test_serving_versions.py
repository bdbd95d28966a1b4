"""Version policies, labels, config reloads and version swaps under load."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from google.protobuf import text_format
from tensorflow_serving.apis import (
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tensorflow_serving.config import model_server_config_pb2

from serving import layout
from serving.client import ModelEntry, ModelServerClient, ModelServerError
from serving.errors import Code, ServingError
from serving.server import ModelServer
from serving.tensors import to_proto

HALF_PLUS_TWO = "saved_model_half_plus_two_cpu"
HALF_PLUS_THREE = "saved_model_half_plus_three"
TWO_VERSIONS = "saved_model_half_plus_two_2_versions"


def config_text(text: str) -> model_server_config_pb2.ModelServerConfig:
    return text_format.Parse(text, model_server_config_pb2.ModelServerConfig())


def one_model(name: str, path: Path, policy: str = "", labels: str = "") -> Any:
    return config_text(
        f'model_config_list {{ config {{ name: "{name}" base_path: "{path}" '
        f'model_platform: "tensorflow" {policy} {labels} }} }}'
    )


def grpc_version(server: ModelServer, name: str, **spec: Any) -> int:
    """Which version answered a gRPC Predict for this model spec."""
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest(model_spec={"name": name, **spec})
        request.inputs["x"].CopyFrom(to_proto(np.array([[1.0]], dtype=np.float32)))
        return int(stub.Predict(request, 30).model_spec.version.value)


def states(server: ModelServer, name: str) -> dict[int, str]:
    return {v: s.state for v, s in server.manager.version_states(name).items()}


def client_for(server: ModelServer) -> ModelServerClient:
    return ModelServerClient(grpc_target=server.grpc_target, rest_url=server.rest_url)


def test_latest_policy_serves_the_newest_version_only(
    model_base: Path, start_server: Callable[..., ModelServer]
) -> None:
    server = start_server(config=one_model("two", model_base / "two_versions"))
    assert states(server, "two") == {124: "AVAILABLE"}
    assert grpc_version(server, "two") == 124
    reply = requests.post(
        server.rest_url + "/v1/models/two/versions/123:predict",
        json={"instances": [1.0]},
        timeout=30,
    )
    assert reply.status_code == 404
    assert reply.json() == {"error": "Servable not found for request: Specific(two, 123)"}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("model_version_policy { specific { versions: 123 } }", {123}),
        ("model_version_policy { all {} }", {123, 124}),
        ("model_version_policy { latest { num_versions: 2 } }", {123, 124}),
    ],
)
def test_version_policies(
    model_base: Path, start_server: Callable[..., ModelServer], policy: str, expected: set[int]
) -> None:
    server = start_server(config=one_model("two", model_base / "two_versions", policy))
    assert states(server, "two") == dict.fromkeys(expected, "AVAILABLE")
    for version in expected:
        assert grpc_version(server, "two", version={"value": version}) == version


def test_labels_follow_tf_serving_rules(
    model_base: Path, start_server: Callable[..., ModelServer]
) -> None:
    path = model_base / "two_versions"
    both = "model_version_policy { specific { versions: 123 versions: 124 } }"
    server = start_server(config=one_model("two", path, both))
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        labels = (
            'version_labels { key: "stable" value: 123 } '
            'version_labels { key: "canary" value: 124 }'
        )
        request = model_management_pb2.ReloadConfigRequest(
            config=one_model("two", path, both, labels)
        )
        assert stub.HandleReloadConfigRequest(request, 30).status.error_code == 0

        bad = 'version_labels { key: "next" value: 125 }'
        with pytest.raises(grpc.RpcError) as failure:
            stub.HandleReloadConfigRequest(
                model_management_pb2.ReloadConfigRequest(config=one_model("two", path, both, bad)),
                30,
            )
    assert failure.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert failure.value.details() == (
        "Request to assign label to version 125 of model two, which is not currently "
        "available for inference"
    )
    assert grpc_version(server, "two", version_label="stable") == 123
    assert grpc_version(server, "two", version_label="canary") == 124
    rest = requests.post(
        server.rest_url + "/v1/models/two/labels/stable:predict",
        json={"instances": [1.0]},
        timeout=30,
    )
    assert rest.json() == {"predictions": [2.5]}
    unknown = requests.post(
        server.rest_url + "/v1/models/two/labels/nope:predict",
        json={"instances": [1.0]},
        timeout=30,
    )
    assert (unknown.status_code, unknown.json()) == (
        400,
        {"error": "Unrecognized servable version label: nope"},
    )


def test_client_labels_a_version_it_is_still_loading(
    model_base: Path, start_server: Callable[..., ModelServer]
) -> None:
    path = model_base / "two_versions"
    server = start_server(
        config=one_model("two", path, "model_version_policy { specific { versions: 123 } }")
    )
    with client_for(server) as client:
        client.reload_config(
            models=[ModelEntry("two", str(path), (123, 124), {"stable": 123, "canary": 124})]
        )
        assert client.model_status(name="two").available == (124, 123)
    assert grpc_version(server, "two", version_label="canary") == 124


def test_reload_adds_a_model_without_reloading_the_others(
    model_base: Path, start_server: Callable[..., ModelServer]
) -> None:
    server = start_server(config=one_model("a", model_base / "half_plus_two"))
    assert grpc_version(server, "a") == 123
    assert server.model_runs(name="a", version=123) == 1
    with client_for(server) as client:
        client.reload_config(
            models=[
                ModelEntry("a", str(model_base / "half_plus_two")),
                ModelEntry("b", str(model_base / "half_plus_three")),
            ]
        )
        assert client.predict_rest(name="b", body=b'{"instances": [1.0]}') == (
            200,
            b'{\n    "predictions": [3.5\n    ]\n}',
        )
        # Same loaded servable: its run counter kept counting.
        assert grpc_version(server, "a") == 123
        assert server.model_runs(name="a", version=123) == 2

        client.reload_config(models=[ModelEntry("a", str(model_base / "half_plus_two"))])
        assert client.model_status(name="b").versions[0].state == "END"
        status, body = client.predict_rest(name="b", body=b'{"instances": [1.0]}')
    assert status == 404
    assert b"Servable not found for request: Latest(b)" in body


def test_a_failed_load_keeps_the_old_version_serving(
    testdata: Path, tmp_path: Path, start_server: Callable[..., ModelServer]
) -> None:
    base = tmp_path / "models"
    layout.publish_version(
        source=testdata / HALF_PLUS_TWO / "00000123", model_base=base, model_name="m"
    )
    server = start_server(config=one_model("m", base / "m"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
    assert layout.publish_version(source=broken, model_base=base, model_name="m").version == 2
    server.manager.poll()
    status = server.manager.version_states("m")
    assert status[1].state == "AVAILABLE"
    assert status[2].state == "END"
    assert status[2].error is not None
    assert grpc_version(server, "m") == 1


class LoadGenerator:
    """Threads predicting through REST and gRPC until stopped, recording every answer."""

    def __init__(self, server: ModelServer, name: str) -> None:
        self.server, self.name = server, name
        self.answers: list[float] = []
        self.failures: list[str] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._rest, daemon=True),
            threading.Thread(target=self._rest, daemon=True),
            threading.Thread(target=self._grpc, daemon=True),
        ]

    def _record(self, answer: float | None, failure: str | None) -> None:
        with self._lock:
            if failure is not None:
                self.failures.append(failure)
            elif answer is not None:
                self.answers.append(answer)

    def _rest(self) -> None:
        url = f"{self.server.rest_url}/v1/models/{self.name}:predict"
        with requests.Session() as http:
            while not self.stop.is_set():
                reply = http.post(url, data=b'{"instances": [1.0]}', timeout=30)
                if reply.status_code == 200:
                    self._record(reply.json()["predictions"][0], None)
                else:
                    self._record(None, f"REST {reply.status_code}: {reply.text}")

    def _grpc(self) -> None:
        request = predict_pb2.PredictRequest(model_spec={"name": self.name})
        request.inputs["x"].CopyFrom(to_proto(np.array([1.0], dtype=np.float32)))
        with grpc.insecure_channel(self.server.grpc_target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            while not self.stop.is_set():
                try:
                    self._record(stub.Predict(request, 30).outputs["y"].float_val[0], None)
                except grpc.RpcError as exc:
                    self._record(None, f"gRPC {exc.code()}: {exc.details()}")

    def count(self) -> int:
        with self._lock:
            return len(self.answers) + len(self.failures)

    def wait_for(self, value: float, timeout: float = 30) -> None:
        """Waits until `value` is being answered, then for some more answers after it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                recent = self.answers[-20:]
            if len(recent) == 20 and set(recent) == {value}:
                return
            time.sleep(0.02)
        raise AssertionError(f"never settled on {value}; failures: {self.failures[:3]}")

    def __enter__(self) -> LoadGenerator:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)


def test_swap_and_rollback_under_load_fail_no_request(
    testdata: Path, tmp_path: Path, start_server: Callable[..., ModelServer]
) -> None:
    base = tmp_path / "models"
    path = layout.model_path(model_base=base, model_name="live")
    publish = layout.publish_version
    assert (
        publish(
            source=testdata / HALF_PLUS_TWO / "00000123", model_base=base, model_name="live"
        ).version
        == 1
    )
    server = start_server(config=one_model("live", path))
    with client_for(server) as client, LoadGenerator(server, "live") as load:
        load.wait_for(2.5)
        # A new version (half_plus_three) is published and picked up: swap to it.
        assert (
            publish(
                source=testdata / HALF_PLUS_THREE / "00000123", model_base=base, model_name="live"
            ).version
            == 2
        )
        client.reload_config(models=[ModelEntry("live", str(path))])
        server.manager.poll()
        load.wait_for(3.5)
        # Roll back to version 1 by pinning it.
        client.reload_config(models=[ModelEntry("live", str(path), versions=(1,))])
        load.wait_for(2.5)
        # And forward again.
        client.reload_config(models=[ModelEntry("live", str(path), versions=(2,))])
        load.wait_for(3.5)
    assert load.failures == []
    assert set(load.answers) == {2.5, 3.5}
    assert load.count() > 100
    assert states(server, "live") == {1: "END", 2: "AVAILABLE"}


def test_file_system_poll_picks_up_new_versions(
    testdata: Path, tmp_path: Path, start_server: Callable[..., ModelServer]
) -> None:
    base = tmp_path / "models"
    for version in ("00000123", "00000124"):
        layout.publish_version(
            source=testdata / TWO_VERSIONS / version, model_base=base, model_name="polled"
        )
    server = start_server(
        config=one_model("polled", base / "polled"), file_system_poll_wait_seconds=0.1
    )
    assert states(server, "polled") == {2: "AVAILABLE"}
    layout.publish_version(
        source=testdata / HALF_PLUS_THREE / "00000123", model_base=base, model_name="polled"
    )
    deadline = time.monotonic() + 30
    while states(server, "polled") != {2: "END", 3: "AVAILABLE"}:
        assert time.monotonic() < deadline, states(server, "polled")
        time.sleep(0.05)
    assert grpc_version(server, "polled") == 3


def test_reload_rejects_configs_tf_serving_rejects(
    model_base: Path, start_server: Callable[..., ModelServer]
) -> None:
    server = start_server(config=one_model("a", model_base / "half_plus_two"))
    with client_for(server) as client:
        with pytest.raises(ModelServerError) as relative:
            client.reload_config(models=[ModelEntry("a", "relative/path")])
        assert relative.value.code == "INVALID_ARGUMENT"
        assert relative.value.message == (
            "Expected model a to have an absolute path or URI; got base_path()=relative/path"
        )
        twice = [ModelEntry("a", str(model_base / "half_plus_two"))] * 2
        with pytest.raises(ModelServerError, match="Illegal to list model a multiple times"):
            client.reload_config(models=twice)
    assert states(server, "a") == {123: "AVAILABLE"}


def test_labels_in_the_startup_config_need_the_allow_flag(
    model_base: Path, start_server: Callable[..., ModelServer]
) -> None:
    # As in TF Serving, labels are checked before anything loads: at start-up nothing is
    # AVAILABLE yet, so a config file with labels needs
    # --allow_version_labels_for_unavailable_models to start.
    labelled = one_model(
        "two",
        model_base / "two_versions",
        "model_version_policy { specific { versions: 123 } }",
        'version_labels { key: "stable" value: 123 }',
    )
    with pytest.raises(ServingError) as refused:
        start_server(config=labelled)
    assert refused.value.code == Code.FAILED_PRECONDITION
    server = start_server(config=labelled, allow_version_labels_for_unavailable_models=True)
    assert grpc_version(server, "two", version_label="stable") == 123
