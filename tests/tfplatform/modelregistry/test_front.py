"""TF Serving's whole API with a platform token, straight to the model server's front: the
tensorflow-serving-api gRPC client and TF Serving's REST shapes, with the web app's visibility,
labels, canary share and revocation, and no database in the model server."""

import time
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from django.test import Client
from rest_framework.test import APIClient
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from serving.config import single_model_config
from serving.server import ModelServer, ServerOptions
from serving.tensors import to_ndarray, to_proto
from tests.factories import RegisteredModelFactory, TeamFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.plugins.live import FRONT_REFRESH_SECONDS
from tests.serving.conftest import copy_tree, gateway_start, testdata_dir
from tests.tfplatform.modelregistry.conftest import HALF_PLUS_THREE, api, register
from tfplatform.accounts.models import ApiToken, User
from tfplatform.accounts.tokens import api_token_issue
from tfplatform.experiments.signals import scheduler_passed
from tfplatform.modelregistry.services.access import serving_access_push

pytestmark = pytest.mark.django_db(transaction=True)


def _as(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def _predict(name: str, x: float, **spec: Any) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    if "version" in spec:
        request.model_spec.version.value = spec["version"]
    if "label" in spec:
        request.model_spec.version_label = spec["label"]
    request.inputs["x"].CopyFrom(to_proto(np.array([x], dtype=np.float32)))
    return request


def _y(answer: Any) -> float:
    array = to_ndarray(answer.outputs["y"])
    assert array is not None
    return float(array[0])


def _examples(target: Any, *xs: float) -> None:
    for x in xs:
        target.example_list.examples.add().features.feature["x"].float_list.value.append(x)


@pytest.fixture
def stubs(model_server: dict[str, Any]) -> Any:
    with grpc.insecure_channel(model_server["grpc"]) as channel:
        yield (prediction_service_pb2_grpc.PredictionServiceStub(channel),
               model_service_pb2_grpc.ModelServiceStub(channel))


def test_tf_serving_grpc_client_with_the_users_platform_token(
    model_server: dict[str, Any], stubs: Any
) -> None:
    team = TeamFactory()
    alice, carol, bob = UserFactory(team=team), UserFactory(team=team), UserFactory()
    register(api(alice), "half")  # half_plus_two: x/2 + 2, classify_x_to_y, regress_x_to_y
    alice_key, carol_key, bob_key = (api_token_issue(user=user, name="grpc")[1]
                                     for user in (alice, carol, bob))
    prediction, models = stubs

    answer = prediction.Predict(_predict("half", 2.0), timeout=30, metadata=_as(alice_key))
    assert _y(answer) == 3.0 and answer.model_spec.version.value == 1
    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name, classify.model_spec.signature_name = "half", "classify_x_to_y"
    _examples(classify.input, 20.0)
    assert prediction.Classify(classify, timeout=30, metadata=_as(carol_key)) \
        .result.classifications[0].classes[0].score == pytest.approx(12.0)
    regress = regression_pb2.RegressionRequest()
    regress.model_spec.name, regress.model_spec.signature_name = "half", "regress_x_to_y"
    _examples(regress.input, 80.0, 2.0)
    assert [r.value for r in prediction.Regress(regress, timeout=30, metadata=_as(alice_key))
            .result.regressions] == [42.0, 3.0]
    multi = inference_pb2.MultiInferenceRequest()
    for method, signature in (("classify", "classify_x_to_y"), ("regress", "regress_x_to_y")):
        task = multi.tasks.add(method_name=f"tensorflow/serving/{method}")
        task.model_spec.name, task.model_spec.signature_name = "half", signature
    _examples(multi.input, 4.0)
    results = prediction.MultiInference(multi, timeout=30, metadata=_as(alice_key)).results
    assert results[1].regression_result.regressions[0].value == 4.0
    metadata = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    metadata.model_spec.name = "half"
    assert prediction.GetModelMetadata(metadata, timeout=30, metadata=_as(alice_key)) \
        .model_spec.version.value == 1
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = "half"
    [available] = models.GetModelStatus(status, timeout=30,
                                        metadata=_as(carol_key)).model_version_status
    assert available.version == 1 and available.state == available.AVAILABLE

    # B gets TF Serving's answer for a model that does not exist, whatever the call.
    for call, request in (("Predict", _predict("half", 2.0)), ("Classify", classify),
                          ("Regress", regress), ("MultiInference", multi),
                          ("GetModelMetadata", metadata)):
        with pytest.raises(grpc.RpcError) as hidden:
            getattr(prediction, call)(request, timeout=30, metadata=_as(bob_key))
        assert hidden.value.code() == grpc.StatusCode.NOT_FOUND, call
        assert "Latest(half)" in (hidden.value.details() or ""), call
    with pytest.raises(grpc.RpcError) as hidden:
        models.GetModelStatus(status, timeout=30, metadata=_as(bob_key))
    assert hidden.value.code() == grpc.StatusCode.NOT_FOUND

    # Public: everyone with a token may use it, as through the web app.
    assert api(alice).patch("/api/v1/models/half/", {"public": True},
                            format="json").status_code == 200
    assert _y(prediction.Predict(_predict("half", 4.0), timeout=30,
                                 metadata=_as(bob_key))) == 4.0


def test_labels_and_the_canary_share_route_grpc_calls(
    model_server: dict[str, Any], stubs: Any
) -> None:
    owner = UserFactory()
    client = api(owner)
    register(client, "canaried")  # v1: x/2 + 2, stable
    register(client, "canaried", HALF_PLUS_THREE)  # v2: x/2 + 3
    key = api_token_issue(user=owner, name="grpc")[1]
    prediction, _ = stubs

    def y(**spec: Any) -> float:
        return _y(prediction.Predict(_predict("canaried", 0.0, **spec), timeout=30,
                                     metadata=_as(key)))

    assert y() == 2.0  # the stable label's version, not the newest
    assert y(version=2) == 3.0
    assert client.post("/api/v1/models/canaried/labels/", {"label": "canary", "version": 2},
                       format="json").status_code == 200
    assert y(label="canary") == 3.0  # the push on the label's change: no wait
    assert client.patch("/api/v1/models/canaried/", {"canary_percent": 100},
                        format="json").status_code == 200
    assert {y() for _ in range(5)} == {3.0}
    assert client.patch("/api/v1/models/canaried/", {"canary_percent": 50},
                        format="json").status_code == 200
    assert {y() for _ in range(60)} == {2.0, 3.0}
    assert client.post("/api/v1/models/canaried/labels/", {"label": "stable", "version": 2},
                       format="json").status_code == 200
    assert client.delete("/api/v1/models/canaried/labels/canary/").status_code == 204
    assert {y() for _ in range(5)} == {3.0}


def test_a_revoked_token_stops_at_once_and_any_change_within_the_refresh(
    model_server: dict[str, Any], stubs: Any, live_server: Any
) -> None:
    owner = UserFactory()
    register(api(owner), "half")
    token, key = api_token_issue(user=owner, name="grpc")
    _, second = api_token_issue(user=owner, name="rest")
    prediction, _ = stubs
    assert _y(prediction.Predict(_predict("half", 2.0), timeout=30, metadata=_as(key))) == 3.0

    # REST, as TF Serving's clients send it, with the platform's own `Token` scheme too.
    rest = f"{model_server['rest']}/v1/models/half"
    answer = requests.post(f"{rest}:predict", json={"instances": [2.0]}, timeout=30,
                           headers={"Authorization": f"Token {second}"})
    assert answer.json() == {"predictions": [3.0]} and answer.headers["X-Model-Version"] == "1"

    revoked = requests.delete(f"{live_server.url}/api/v1/auth/tokens/{token.pk}/", timeout=30,
                              headers={"Authorization": f"Token {key}"})
    assert revoked.status_code == 204
    with pytest.raises(grpc.RpcError) as refused:
        prediction.Predict(_predict("half", 2.0), timeout=30, metadata=_as(key))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

    # A change that no signal reports (a bulk update) reaches the front with the next refresh
    # the scheduler loop makes.
    User.objects.filter(pk=owner.pk).update(is_active=False)
    assert requests.post(f"{rest}:predict", json={"instances": [2.0]}, timeout=30,
                         headers={"Authorization": f"Token {second}"}).status_code == 200
    time.sleep(FRONT_REFRESH_SECONDS)
    scheduler_passed.send_robust(sender=None)
    stopped = requests.post(f"{rest}:predict", json={"instances": [2.0]}, timeout=30,
                            headers={"Authorization": f"Token {second}"})
    assert stopped.status_code == 401 and "error" in stopped.json()
    assert ApiToken.objects.filter(user=owner).count() == 1


def test_the_api_says_where_direct_calls_go(
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    owner = UserFactory()
    client, browser = api(owner), Client()
    browser.force_login(owner)
    RegisteredModelFactory(name="m", owner=owner)
    platform_settings_override(tf_serving_front_refresh_seconds=5.0,
                               tf_serving_grpc="127.0.0.1:9500",
                               tf_serving_rest="http://127.0.0.1:9501")
    assert client.get("/api/v1/serving/").json() == {"grpc": "127.0.0.1:9500",
                                                     "rest": "http://127.0.0.1:9501"}
    page = browser.get("/models/m/").content.decode()
    assert "<code>127.0.0.1:9500</code>" in page
    assert "<code>POST http://127.0.0.1:9501/v1/models/m:predict</code>" in page
    platform_settings_override(tf_serving_front_refresh_seconds=0.0)  # stock TF Serving
    assert client.get("/api/v1/serving/").json() == {"grpc": None, "rest": None}
    assert "127.0.0.1:9500" not in browser.get("/models/m/").content.decode()
    assert APIClient().get("/api/v1/serving/").status_code == 401


def test_before_stock_tf_serving_the_gateway_takes_what_the_platform_pushes(
    platform_settings_override: PlatformSettingsOverride, tmp_path: Any,
) -> None:
    """docker-compose.yml's shape: TF Serving with no token of its own (here the embedded
    server started without one, standing in), the gateway in front of it; the platform pushes
    the gateway its table and shows users the public addresses."""
    base = copy_tree(testdata_dir() / "saved_model_half_plus_two_cpu", tmp_path / "half")
    stock = ModelServer(options=ServerOptions(grpc_port=0, rest_api_port=0, host="127.0.0.1",
                                              file_system_poll_wait_seconds=0),
                        config=single_model_config(name="half", base_path=str(base)))
    stock.start()
    gateway = gateway_start(upstream_grpc=stock.grpc_target, upstream_rest=stock.rest_url,
                            token="the-platforms-serving-token")
    try:
        platform_settings_override(
            tf_serving_access_token="the-platforms-serving-token",
            tf_serving_front_refresh_seconds=60.0,
            tf_serving_front_grpc=gateway.grpc_target, tf_serving_front_rest=gateway.rest_url,
            tf_serving_public_grpc="models.example.org:8543",
            tf_serving_public_rest="https://models.example.org")
        alice, bob = UserFactory(), UserFactory()
        RegisteredModelFactory(name="half", owner=alice)
        alice_key, bob_key = (api_token_issue(user=user, name="direct")[1]
                              for user in (alice, bob))
        assert serving_access_push()
        with grpc.insecure_channel(gateway.grpc_target) as channel:
            prediction = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            answer = prediction.Predict(_predict("half", 2.0), timeout=30,
                                        metadata=_as(alice_key))
            assert _y(answer) == pytest.approx(3.0)
            with pytest.raises(grpc.RpcError) as hidden:
                prediction.Predict(_predict("half", 2.0), timeout=30, metadata=_as(bob_key))
            assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
        rest = requests.post(f"{gateway.rest_url}/v1/models/half:predict", timeout=30,
                             json={"instances": [2.0]},
                             headers={"authorization": f"Bearer {alice_key}"})
        assert rest.status_code == 200 and rest.json() == {"predictions": [3.0]}
        shown = APIClient()
        shown.force_authenticate(alice)
        assert shown.get("/api/v1/serving/").json() == {
            "grpc": "models.example.org:8543", "rest": "https://models.example.org"}
    finally:
        gateway.process.terminate()
        gateway.process.wait(timeout=10)
        stock.stop()
