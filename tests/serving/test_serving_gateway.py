"""The gateway's own parts (test_serving_front.py runs the front's tests through it too): requests
pass through with only their ModelSpec read, nothing but the model calls is forwarded, and it
refuses to run without its token or to hide an unreachable TF Serving."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

import grpc
import numpy as np
import pytest
import requests
from tensorflow_serving.apis import (
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from serving.front import (
    ACCESS_PATH,
    AccessTable,
    Caller,
    ModelAccess,
    access_table_to_wire,
    token_digest,
)
from serving.gateway_grpc import SpecOnly, TasksOnly
from serving.routes import ModelRoute
from serving.tensors import to_proto
from tests.serving.conftest import ROOT, Gateway, free_port

TOKEN = "the-gateways-own-token"
ALICE = "tfp_alice"


def test_only_the_model_spec_is_read_and_every_other_field_passes_unchanged() -> None:
    request = predict_pb2.PredictRequest(output_filter=["y"])
    request.model_spec.name, request.model_spec.version_label = "alice", "stable"
    request.model_spec.signature_name = "serving_default"
    request.inputs["x"].CopyFrom(to_proto(np.arange(1000, dtype=np.float32)))
    partial = SpecOnly.FromString(request.SerializeToString())
    partial.model_spec.version.value = 7
    back = predict_pb2.PredictRequest.FromString(partial.SerializeToString())
    expected = predict_pb2.PredictRequest()
    expected.CopyFrom(request)
    expected.model_spec.version.value = 7  # the label goes: version and label are a oneof
    assert back == expected

    multi = inference_pb2.MultiInferenceRequest()
    for name in ("a", "b"):
        task = multi.tasks.add(method_name="tensorflow/serving/regress")
        task.model_spec.name = name
    multi.input.example_list.examples.add().features.feature["x"].float_list.value.append(2.0)
    partial = TasksOnly.FromString(multi.SerializeToString())
    for task in partial.tasks:
        task.model_spec.version.value = 3
    back = inference_pb2.MultiInferenceRequest.FromString(partial.SerializeToString())
    assert [(t.model_spec.name, t.model_spec.version.value, t.method_name) for t in back.tasks] \
        == [("a", 3, "tensorflow/serving/regress"), ("b", 3, "tensorflow/serving/regress")]
    assert back.input == multi.input


def test_without_its_own_token_the_gateway_does_not_start() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "serving.gateway", "--upstream_grpc", "127.0.0.1:1",
         "--upstream_rest", "http://127.0.0.1:1", "--port", "0", "--rest_api_port", "0"],
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "the gateway needs its own token" in done.stderr


def _table() -> AccessTable:
    far = time.time() + 3600
    return AccessTable(
        callers={token_digest(ALICE): Caller(user=1, team=None, staff=True, expires_at=far)},
        models={"alice": ModelAccess(route=ModelRoute(name="alice", canary_percent=0, labels={}),
                                     owner=1, team=None, public=False)})


@pytest.fixture
def orphan(start_gateway: Callable[..., Gateway]) -> Gateway:
    """A gateway whose TF Serving is not there."""
    nowhere = free_port()
    gateway = start_gateway(upstream_grpc=f"127.0.0.1:{nowhere}",
                            upstream_rest=f"http://127.0.0.1:{nowhere}", token=TOKEN)
    pushed = requests.put(f"{gateway.rest_url}{ACCESS_PATH}", timeout=10,
                          data=json.dumps(access_table_to_wire(_table())),
                          headers={"authorization": f"Bearer {TOKEN}"})
    assert pushed.status_code == 204, pushed.text
    return gateway


def test_an_unreachable_tf_serving_is_said_so_and_nothing_else_is_forwarded(
    orphan: Gateway,
) -> None:
    answer = requests.post(f"{orphan.rest_url}/v1/models/alice:predict", timeout=30,
                           json={"instances": [1.0]}, headers={"authorization": f"Bearer {ALICE}"})
    assert answer.status_code == 503
    assert "could not be reached" in answer.json()["error"]
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "alice"
    with grpc.insecure_channel(orphan.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as down:
            prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
                request, timeout=10, metadata=(("authorization", f"Bearer {ALICE}"),))
        assert down.value.code() == grpc.StatusCode.UNAVAILABLE
        # Reload is the platform's, on the internal network: not even the gateway's own token
        # has it forwarded.
        with pytest.raises(grpc.RpcError) as reload:
            model_service_pb2_grpc.ModelServiceStub(channel).HandleReloadConfigRequest(
                model_management_pb2.ReloadConfigRequest(), timeout=10,
                metadata=(("authorization", f"Bearer {TOKEN}"),))
        assert reload.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # A push needs the gateway's own token; a user's is another caller asking for a path.
    assert requests.put(f"{orphan.rest_url}{ACCESS_PATH}", data=b"{}", timeout=10,
                        headers={"authorization": f"Bearer {ALICE}"}).status_code == 404
    bad = requests.put(f"{orphan.rest_url}{ACCESS_PATH}", data=b"{]", timeout=10,
                       headers={"authorization": f"Bearer {TOKEN}"})
    assert bad.status_code == 400 and "error" in bad.json()


def test_the_gateway_loads_neither_tensorflow_nor_numpy() -> None:
    """It only reads ModelSpecs and passes bytes: a small process beside stock TF Serving."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, serving.gateway; "
         "print(sorted({'tensorflow', 'numpy', 'django'} & set(sys.modules)))"],
        cwd=ROOT, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
