"""ModelServerClient against a running server, over real gRPC and HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from serving import layout
from serving.client import ModelEntry, ModelServerClient, ModelServerError
from serving.server import ModelServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(model_base: Path, start_server: Callable[..., ModelServer]) -> ModelServer:
    return start_server(config=None)


@pytest.fixture
def client(served: ModelServer) -> Iterator[ModelServerClient]:
    with ModelServerClient(grpc_target=served.grpc_target, rest_url=served.rest_url) as made:
        yield made


def entries(model_base: Path) -> list[ModelEntry]:
    return [
        ModelEntry("hp2", str(model_base / "half_plus_two")),
        ModelEntry(
            "two", str(model_base / "two_versions"), versions=(123, 124), labels={"stable": 123}
        ),
    ]


def test_reload_status_and_inference(client: ModelServerClient, model_base: Path) -> None:
    assert client.model_status(name="hp2").versions == ()
    client.reload_config(models=entries(model_base))
    status = client.wait_available(name="two", version=124, timeout=30)
    assert (status.state, status.error_code) == ("AVAILABLE", "OK")
    assert client.model_status(name="two").available == (124, 123)
    assert client.model_status(name="two", version=123).available == (123,)

    assert client.predict_rest(name="hp2", body=b'{"instances": [1.0, 2.0]}') == (
        200,
        b'{\n    "predictions": [2.5, 3.0\n    ]\n}',
    )
    labelled = client.predict_rest(name="two", label="stable", body=b'{"inputs": [4.0]}')
    assert labelled == (200, b'{\n    "outputs": [\n        4.0\n    ]\n}')
    status_code, body = client.predict_rest(name="two", version=7, body=b'{"inputs": [4.0]}')
    assert status_code == 404
    assert json.loads(body) == {"error": "Servable not found for request: Specific(two, 7)"}

    outputs = client.predict(name="hp2", inputs={"x": np.array([[1.0], [3.0]], np.float32)})
    assert outputs["y"].tolist() == [[2.5], [3.5]]
    assert client.classify(
        name="hp2", signature_name="classify_x_to_y", examples=[{"x": 2.0}, {"x": 4.0}]
    ) == [[("", 3.0)], [("", 4.0)]]
    assert client.regress(
        name="two", label="stable", signature_name="regress_x_to_y", examples=[{"x": 80.0}]
    ) == [42.0]
    assert client.regress(
        name="hp2", signature_name="regress_x_to_y", context={"x": 2.0}, examples=[{}]
    ) == [3.0]
    metadata = client.metadata(name="two", version=123)
    assert (metadata.name, metadata.version) == ("two", 123)
    default = metadata.signatures["serving_default"]
    assert default.method_name == "tensorflow/serving/predict"
    assert default.inputs["x"].dtype == "DT_FLOAT"
    assert default.inputs["x"].shape == (-1, 1)
    assert metadata.signatures["classify_x_to_y"].inputs["inputs"].shape is None


def test_errors_carry_tf_serving_codes(
    client: ModelServerClient, model_base: Path, tmp_path: Path
) -> None:
    with pytest.raises(ModelServerError) as missing:
        client.predict(name="nope", inputs={"x": np.ones(1, np.float32)})
    assert (missing.value.code, missing.value.message) == (
        "NOT_FOUND",
        "Servable not found for request: Latest(nope)",
    )
    with pytest.raises(ValueError, match="unserved versions"):
        client.reload_config(
            models=[ModelEntry("two", str(model_base / "two_versions"), (123,), {"x": 124})]
        )
    with pytest.raises(TimeoutError):
        client.wait_available(name="hp2", version=99, timeout=0.3)

    base = tmp_path / "models"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
    layout.publish_version(source=broken, model_base=base, model_name="broken")
    # A model that cannot load makes the reload fail, as tensorflow_model_server reports it.
    with pytest.raises(ModelServerError) as failed:
        client.reload_config(models=[ModelEntry("broken", str(base / "broken"))])
    assert failed.value.code == "UNKNOWN"
    assert failed.value.message.startswith(
        "1 model(s) did not become available: {{{name: broken version: 1} due to error: "
    )
    with pytest.raises(ModelServerError):
        client.wait_available(name="broken", version=1, timeout=5)


def test_deploying_and_forwarding_do_not_load_tensorflow(
    served: ModelServer, model_base: Path
) -> None:
    # The web process deploys models and forwards REST predictions without importing TF.
    script = textwrap.dedent(
        f"""
        import sys
        from serving.client import ModelEntry, ModelServerClient

        client = ModelServerClient(grpc_target={served.grpc_target!r}, rest_url={served.rest_url!r})
        client.reload_config(models=[ModelEntry("hp2", {str(model_base / "half_plus_two")!r})])
        client.wait_available(name="hp2", version=123, timeout=30)
        print(client.predict_rest(name="hp2", body=b'{{"instances": [2.0]}}')[0])
        print(sorted(m for m in sys.modules if m == "tensorflow" or m.startswith("tensorflow.")))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["200", "[]"]
