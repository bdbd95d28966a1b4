"""The model server's front: platform users call it with their own tokens over TF Serving's
gRPC client and REST shapes, against the access table the platform pushes; the server's own
token keeps its full access. Each test through a served model runs three times: against the
embedded server's own front; against the gateway (serving/gateway.py) in front of a server with no
front and no token, as stock TF Serving is in docker-compose.yml; and against the gateway in front
of an embedded server that demands its own token, which the gateway sends in the caller's
place."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from serving.client import ModelEntry, model_server_config
from serving.errors import Code, ServingError
from serving.front import (
    ACCESS_PATH,
    AccessTable,
    Caller,
    Front,
    ModelAccess,
    access_table_from_wire,
    access_table_to_wire,
    token_digest,
)
from serving.routes import ModelRoute
from serving.server import ModelServer
from serving.tensors import to_ndarray, to_proto
from tests.serving.conftest import Gateway

INTERNAL = "the-servers-own-token"
UPSTREAM = "the-upstream-servers-own-token"  # a gateway's upstream's, when it has one
ALICE, BOB, CAROL, STAFF = "tfp_alice", "tfp_bob", "tfp_carol_same_team", "tfp_staff"
FAR = time.time() + 3600


def _table(*, alice_labels: dict[str, int] | None = None, canary: int = 0,
           callers: dict[str, Caller] | None = None, rate: int | None = None) -> AccessTable:
    people = callers if callers is not None else {
        ALICE: Caller(user=1, team=10, staff=False, expires_at=FAR),
        BOB: Caller(user=2, team=None, staff=False, expires_at=FAR),
        CAROL: Caller(user=3, team=10, staff=False, expires_at=FAR),
        STAFF: Caller(user=4, team=None, staff=True, expires_at=FAR),
    }
    labels = {"stable": 123} if alice_labels is None else alice_labels
    return AccessTable(
        callers={token_digest(key): caller for key, caller in people.items()},
        models={
            "alice": ModelAccess(route=ModelRoute(name="alice", canary_percent=canary,
                                                  labels=labels),
                                 owner=1, team=10, public=False),
            "shared": ModelAccess(route=ModelRoute(name="shared", canary_percent=0, labels={}),
                                  owner=2, team=None, public=True),
        },
        rate_limit=rate,
    )


def _caller(key: str) -> Caller:
    return Caller(user=len(key), team=None, staff=False, expires_at=FAR)


# ---- the rules, without a server -----------------------------------------------------------

def test_table_survives_the_wire_and_garbage_is_refused() -> None:
    table = _table(rate=7)
    assert access_table_from_wire(access_table_to_wire(table)) == table
    for bad in ({}, {"callers": [], "models": {}, "rate": [1, 1]},
                {"callers": {"d": [1, None, False]}, "models": {}, "rate": [None, 60]}, None):
        with pytest.raises(ValueError, match="not an access table"):
            access_table_from_wire(bad)


def test_who_may_call_what() -> None:
    now = [0.0]
    front = Front(max_age_seconds=5, clock=lambda: now[0])
    with pytest.raises(ServingError) as never_pushed:
        front.caller(f"Bearer {ALICE}")
    assert never_pushed.value.code == Code.UNAVAILABLE
    expired = {ALICE: Caller(user=1, team=10, staff=False, expires_at=time.time() - 1)}
    front.table_set(_table(callers={**expired, BOB: _table().callers[token_digest(BOB)]}))
    for presented in (None, "", "Bearer", "Basic tfp_bob", "Bearer tfp_nobody", f"Bearer {ALICE}"):
        with pytest.raises(ServingError) as refused:
            front.caller(presented)
        assert refused.value.code == Code.UNAUTHENTICATED, presented
    assert front.caller(f"Token {BOB}").user == front.caller(f"bearer {BOB}").user == 2

    front.table_set(_table())
    def route(key: str, name: str, **kwargs: Any) -> tuple[int | None, str | None]:
        call = kwargs.pop("call", "predict")
        routed = front.route(caller=front.caller(f"Bearer {key}"), name=name, call=call,
                             version=kwargs.get("version"), label=kwargs.get("label"))
        return routed.version, routed.label

    assert route(ALICE, "alice") == route(CAROL, "alice") == route(STAFF, "alice") \
        == (123, "stable")
    assert route(BOB, "shared") == route(ALICE, "shared") == (None, None)
    assert route(ALICE, "alice", version=124) == (124, None)
    assert route(ALICE, "alice", label="nolabel") == (None, "nolabel")
    assert route(ALICE, "alice", call="status") == (None, None)
    assert route(ALICE, "alice", call="metadata") == (123, "stable")
    for name in ("alice", "nobody"):
        with pytest.raises(ServingError) as hidden:
            route(BOB, name)
        assert hidden.value.code == Code.NOT_FOUND
        assert hidden.value.message == f"Servable not found for request: Latest({name})"

    now[0] = 5.5  # the last push is older than the maximum age: nobody is trusted
    with pytest.raises(ServingError) as stale:
        front.caller(f"Bearer {ALICE}")
    assert stale.value.code == Code.UNAVAILABLE


def test_canary_share_and_throttle() -> None:
    now = [0.0]
    front = Front(max_age_seconds=600, clock=lambda: now[0])
    front.table_set(_table(alice_labels={"stable": 123, "canary": 124}, canary=30, rate=4))
    alice = front.caller(f"Bearer {ALICE}")
    picks = [front.route(caller=alice, name="alice", call="predict", version=None, label=None,
                         roll=roll).version for roll in (0, 29.9, 30, 99)]
    assert picks == [124, 124, 123, 123]
    with pytest.raises(ServingError) as throttled:
        front.route(caller=alice, name="alice", call="predict", version=None, label=None)
    assert throttled.value.code == Code.RESOURCE_EXHAUSTED
    carol = front.caller(f"Bearer {CAROL}")  # counted per user
    assert front.route(caller=carol, name="alice", call="status", version=None,
                       label=None).version is None
    now[0] = 60.0  # the next window
    assert front.route(caller=alice, name="alice", call="predict", version=None, label=None,
                       roll=50).version == 123


# ---- through a served model ----------------------------------------------------------------

@pytest.fixture(params=["embedded", "gateway", "gateway_to_embedded"])
def fronted(request: pytest.FixtureRequest, model_base: Path, tmp_path: Path,
            start_server: Callable[..., ModelServer],
            start_gateway: Callable[..., Gateway]) -> ModelServer | Gateway:
    config = model_server_config([
        ModelEntry(name="alice", base_path=str(model_base / "two_versions"), versions=(123, 124),
                   labels={"stable": 123, "canary": 124}),
        ModelEntry(name="shared", base_path=str(model_base / "half_plus_two")),
    ])
    server: ModelServer | Gateway
    if request.param == "embedded":
        server = start_server(config=config, access_token=INTERNAL, front_max_age_seconds=30,
                              allow_version_labels_for_unavailable_models=True)
    elif request.param == "gateway":
        upstream = start_server(config=config, allow_version_labels_for_unavailable_models=True)
        server = start_gateway(upstream_grpc=upstream.grpc_target,
                               upstream_rest=upstream.rest_url, token=INTERNAL)
    else:
        upstream = start_server(config=config, access_token=UPSTREAM,
                                allow_version_labels_for_unavailable_models=True)
        (tmp_path / "upstream-token").write_text(UPSTREAM)
        server = start_gateway(upstream_grpc=upstream.grpc_target,
                               upstream_rest=upstream.rest_url, token=INTERNAL,
                               upstream_token_file=tmp_path / "upstream-token")
    assert _push(server, _table()).status_code == 204
    return server


def _push(server: ModelServer | Gateway, table: AccessTable,
          token: str = INTERNAL) -> requests.Response:
    import json

    return requests.put(f"{server.rest_url}{ACCESS_PATH}", timeout=10,
                        data=json.dumps(access_table_to_wire(table)),
                        headers={"authorization": f"Bearer {token}"})


@pytest.fixture
def stubs(fronted: ModelServer | Gateway) -> Iterator[tuple[Any, Any]]:
    with grpc.insecure_channel(fronted.grpc_target) as channel:
        yield (prediction_service_pb2_grpc.PredictionServiceStub(channel),
               model_service_pb2_grpc.ModelServiceStub(channel))


def _as(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def _predict(name: str, **spec: Any) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    for field, value in spec.items():
        if field == "version":
            request.model_spec.version.value = value
        else:
            setattr(request.model_spec, field, value)
    request.inputs["x"].CopyFrom(to_proto(np.array([1.0, 2.0], dtype=np.float32)))
    return request


def _example_input(target: Any, x: float) -> None:
    target.example_list.examples.add().features.feature["x"].float_list.value.append(x)


def test_tf_servings_grpc_client_with_a_platform_token(stubs: tuple[Any, Any]) -> None:
    prediction, models = stubs
    answer = prediction.Predict(_predict("alice"), timeout=30, metadata=_as(ALICE))
    assert _array(answer.outputs["y"]).tolist() == [2.5, 3.0]
    assert answer.model_spec.version.value == 123  # the stable label's
    labelled = prediction.Predict(_predict("alice", version_label="canary"), timeout=30,
                                  metadata=_as(CAROL))
    assert labelled.model_spec.version.value == 124

    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name, classify.model_spec.signature_name = "alice", "classify_x_to_y"
    _example_input(classify.input, 20.0)
    classified = prediction.Classify(classify, timeout=30, metadata=_as(ALICE))
    assert classified.result.classifications[0].classes[0].score == pytest.approx(12.0)
    assert classified.model_spec.version.value == 123

    regress = regression_pb2.RegressionRequest()
    regress.model_spec.name, regress.model_spec.signature_name = "alice", "regress_x_to_y"
    _example_input(regress.input, 80.0)
    assert prediction.Regress(regress, timeout=30, metadata=_as(STAFF)) \
        .result.regressions[0].value == pytest.approx(42.0)

    multi = inference_pb2.MultiInferenceRequest()
    for method, signature in (("tensorflow/serving/classify", "classify_x_to_y"),
                              ("tensorflow/serving/regress", "regress_x_to_y")):
        task = multi.tasks.add()
        task.model_spec.name, task.model_spec.signature_name = "alice", signature
        task.method_name = method
    _example_input(multi.input, 2.0)
    results = prediction.MultiInference(multi, timeout=30, metadata=_as(ALICE)).results
    assert [r.model_spec.version.value for r in results] == [123, 123]
    assert results[1].regression_result.regressions[0].value == pytest.approx(3.0)

    metadata = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    metadata.model_spec.name = "alice"
    assert prediction.GetModelMetadata(metadata, timeout=30, metadata=_as(ALICE)) \
        .model_spec.version.value == 123
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = "alice"
    versions = models.GetModelStatus(status, timeout=30, metadata=_as(CAROL)).model_version_status
    assert sorted(v.version for v in versions) == [123, 124]

    public = prediction.Predict(_predict("shared"), timeout=30, metadata=_as(BOB))
    assert _array(public.outputs["y"]).tolist() == [2.5, 3.0]


def test_others_learn_nothing_and_only_model_calls_are_open(stubs: tuple[Any, Any]) -> None:
    prediction, models = stubs
    for name in ("alice", "nobody"):
        with pytest.raises(grpc.RpcError) as hidden:
            prediction.Predict(_predict(name), timeout=30, metadata=_as(BOB))
        assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
        assert hidden.value.details() == f"Servable not found for request: Latest({name})"
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = "alice"
    with pytest.raises(grpc.RpcError) as hidden:
        models.GetModelStatus(status, timeout=30, metadata=_as(BOB))
    assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
    multi = inference_pb2.MultiInferenceRequest()
    for name in ("shared", "alice"):  # one task on a model B may not see refuses the call
        task = multi.tasks.add()
        task.model_spec.name, task.model_spec.signature_name = name, "regress_x_to_y"
        task.method_name = "tensorflow/serving/regress"
    _example_input(multi.input, 2.0)
    with pytest.raises(grpc.RpcError) as hidden:
        prediction.MultiInference(multi, timeout=30, metadata=_as(BOB))
    assert hidden.value.code() == grpc.StatusCode.NOT_FOUND

    empty = model_management_pb2.ReloadConfigRequest()
    empty.config.model_config_list.SetInParent()  # would unload every model
    with pytest.raises(grpc.RpcError) as refused:
        models.HandleReloadConfigRequest(empty, timeout=30, metadata=_as(STAFF))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    for metadata in (None, _as("tfp_unknown")):
        with pytest.raises(grpc.RpcError) as unknown:
            prediction.Predict(_predict("shared"), timeout=30, metadata=metadata)
        assert unknown.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # The server's own token still reaches everything, as the platform's client uses it.
    assert prediction.Predict(_predict("alice", version=124), timeout=30,
                              metadata=_as(INTERNAL)).model_spec.version.value == 124


def test_tf_servings_rest_shapes_with_a_platform_token(fronted: ModelServer | Gateway) -> None:
    base = f"{fronted.rest_url}/v1/models"
    with requests.Session() as http:
        http.headers["authorization"] = f"Bearer {ALICE}"
        predicted = http.post(f"{base}/alice:predict", json={"instances": [1.0, 2.0]}, timeout=30)
        assert predicted.status_code == 200, predicted.text
        assert predicted.json() == {"predictions": [2.5, 3.0]}
        assert predicted.headers["X-Model-Version"] == "123"
        assert predicted.headers["X-Model-Label"] == "stable"
        assert http.post(f"{base}/alice/labels/canary:regress", timeout=30, json={
            "signature_name": "regress_x_to_y", "examples": [{"x": 80.0}]}).json() \
            == {"results": [42.0]}
        status = http.get(f"{base}/alice", timeout=30).json()["model_version_status"]
        assert sorted(int(v["version"]) for v in status) == [123, 124]
        assert http.get(f"{base}/alice/metadata", timeout=30).json()["model_spec"]["version"] \
            == "123"
        assert http.get(f"{base}/alice/versions/124/metadata", timeout=30).status_code == 200

        http.headers["authorization"] = f"Token {BOB}"
        for method, where in (("POST", "/alice:predict"), ("GET", "/alice"),
                              ("GET", "/alice/metadata")):
            hidden = http.request(method, f"{base}{where}", json={}, timeout=30)
            assert hidden.status_code == 404
            assert hidden.json() == {"error": "Servable not found for request: Latest(alice)"}
        for where in ("/v1/models", "/monitoring/prometheus/metrics", ACCESS_PATH):
            assert http.get(f"{fronted.rest_url}{where}", timeout=30).status_code == 404
        # A user's token cannot push a table.
        assert _push(fronted, _table(callers={BOB: Caller(user=1, team=10, staff=True,
                                                           expires_at=FAR)}),
                     token=BOB).status_code == 404
        assert http.post(f"{base}/alice:predict", json={}, timeout=30).status_code == 404
        http.headers["authorization"] = "Bearer tfp_unknown"
        refused = http.post(f"{base}/shared:predict", json={"instances": [1.0]}, timeout=30)
        assert refused.status_code == 401 and "error" in refused.json()


def test_a_push_revokes_at_once_and_a_bad_push_changes_nothing(
    fronted: ModelServer | Gateway, stubs: tuple[Any, Any]
) -> None:
    prediction, _ = stubs
    assert prediction.Predict(_predict("alice"), timeout=30, metadata=_as(CAROL))
    assert _push(fronted, _table(callers={ALICE: _table().callers[token_digest(ALICE)]})) \
        .status_code == 204
    with pytest.raises(grpc.RpcError) as revoked:
        prediction.Predict(_predict("alice"), timeout=30, metadata=_as(CAROL))
    assert revoked.value.code() == grpc.StatusCode.UNAUTHENTICATED
    bad = requests.put(f"{fronted.rest_url}{ACCESS_PATH}", data=b"{]", timeout=10,
                       headers={"authorization": f"Bearer {INTERNAL}"})
    assert bad.status_code == 400
    assert prediction.Predict(_predict("alice"), timeout=30, metadata=_as(ALICE))


def test_an_old_table_is_not_trusted(model_base: Path,
                                     start_server: Callable[..., ModelServer]) -> None:
    config = model_server_config([ModelEntry(name="shared",
                                             base_path=str(model_base / "half_plus_two"))])
    server = start_server(config=config, access_token=INTERNAL, front_max_age_seconds=1)
    url = f"{server.rest_url}/v1/models/shared:predict"
    headers = {"authorization": f"Bearer {BOB}"}
    assert requests.post(url, json={"instances": [1.0]}, headers=headers,
                         timeout=10).status_code == 503
    _push(server, _table())
    assert requests.post(url, json={"instances": [1.0]}, headers=headers,
                         timeout=10).status_code == 200
    time.sleep(1.2)
    stale = requests.post(url, json={"instances": [1.0]}, headers=headers, timeout=10)
    assert stale.status_code == 503 and "out of date" in stale.json()["error"]


def _array(proto: Any) -> Any:
    array = to_ndarray(proto)
    assert array is not None
    return array
