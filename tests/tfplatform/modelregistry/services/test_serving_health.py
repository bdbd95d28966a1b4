"""Serving health: the scheduler's pass scrapes the real model server's Prometheus endpoint
and the model page and API show request rate, error rate and latency after known traffic, for
the whole model and for each of its versions."""

from typing import Any

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse

from serving.client import ModelServerError
from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.modelregistry.conftest import HALF_PLUS_THREE, api, predict, register
from tfplatform.experiments.signals import scheduler_passed
from tfplatform.modelregistry.models import ServingSample
from tfplatform.modelregistry.server import model_server_client
from tfplatform.modelregistry.services.health import serving_health_record

pytestmark = pytest.mark.django_db(transaction=True)


def scheduler_pass() -> None:
    """What the scheduler loop sends after each pass; a receiver's error would be returned."""
    for _, result in scheduler_passed.send_robust(sender=None):
        assert not isinstance(result, Exception), result


def test_health_after_known_traffic(model_server: dict[str, Any], settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(serving_health_sample_seconds=0.0)
    owner_user = UserFactory()
    owner = api(owner_user)
    register(owner, "health-a")
    register(owner, "health-a", HALF_PLUS_THREE)  # version 2
    v1, v2 = ("/api/v1/models/health-a/versions/1:predict",
              "/api/v1/models/health-a/versions/2:predict")
    assert predict(owner, v1, {"instances": [1.0]}).status_code == 200
    assert predict(owner, v2, {"instances": [1.0]}).status_code == 200
    scheduler_pass()  # the first samples: the model's and each version's counts so far
    assert set(ServingSample.objects.filter(model__name="health-a").values_list(
        "version", flat=True)) == {None, 1, 2}

    ok_v1, ok_v2, failing_v2 = 3, 1, 2
    for value in range(ok_v1):
        assert predict(owner, v1, {"instances": [float(value)]}).status_code == 200
    for value in range(ok_v2):
        assert predict(owner, v2, {"instances": [float(value)]}).status_code == 200
    server = model_server_client()
    for _ in range(failing_v2):
        with pytest.raises(ModelServerError) as refused:
            server.predict(name="health-a", inputs={"nope": np.array([1.0], np.float32)})
        assert refused.value.code == "INVALID_ARGUMENT"
    scheduler_pass()

    answer = owner.get("/api/v1/models/health-a/health/")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["model"] == "health-a"
    ok, failing = ok_v1 + ok_v2, failing_v2
    health = body["health"]
    assert health["requests"] == ok + failing
    assert health["failed"] == failing
    assert health["error_rate"] == pytest.approx(failing / (ok + failing))
    assert health["request_rate"] == pytest.approx((ok + failing) / health["window_seconds"])
    assert 0 < health["p50_ms"] <= health["p99_ms"] < 60_000
    versions = {entry["version"]: entry["health"] for entry in body["versions"]}
    assert [entry["version"] for entry in body["versions"]] == [2, 1]
    assert (versions[1]["requests"], versions[1]["failed"]) == (ok_v1, 0)
    assert versions[1]["error_rate"] == 0
    assert (versions[2]["requests"], versions[2]["failed"]) == (ok_v2 + failing_v2, failing_v2)
    assert versions[2]["error_rate"] == pytest.approx(failing_v2 / (ok_v2 + failing_v2))
    for figures in versions.values():
        assert 0 < figures["p50_ms"] <= figures["p99_ms"] < 60_000

    browser = Client()
    browser.force_login(owner_user)
    page = browser.get(reverse("model-detail", args=["health-a"]))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="serving-health"' in html
    assert "33.3 %" in html  # 2 of 6 failed
    assert f"({ok + failing} in" in html
    assert "ms</dd>" in html
    row_v2 = html[html.index('id="version-health-2"'):]
    row_v2 = row_v2[:row_v2.index("</tr>")]
    assert "66.7 % (2)" in row_v2  # 2 of version 2's 3 failed
    assert 'id="version-health-1"' in html

    stranger = UserFactory()
    assert api(stranger).get("/api/v1/models/health-a/health/").status_code == 404
    other = Client()
    other.force_login(stranger)
    assert other.get(reverse("model-detail", args=["health-a"])).status_code == 404


def test_health_waits_for_two_samples(model_server: dict[str, Any]) -> None:
    owner_user = UserFactory()
    owner = api(owner_user)
    register(owner, "health-b")
    answer = owner.get("/api/v1/models/health-b/health/")
    assert answer.status_code == 200
    assert answer.json()["health"] is None
    browser = Client()
    browser.force_login(owner_user)
    page = browser.get(reverse("model-detail", args=["health-b"])).content.decode()
    assert 'id="health-none"' in page and "needs two samples" in page


def test_an_unreachable_model_server_does_not_break_the_scheduler_pass(settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(
        serving_health_sample_seconds=0.0,
        tf_serving_rest="http://127.0.0.1:9",
    )
    with pytest.raises(ModelServerError):
        serving_health_record()
    scheduler_pass()  # the receiver logs it and the pass goes on
    assert not ServingSample.objects.exists()
