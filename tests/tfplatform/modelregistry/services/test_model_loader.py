"""Deploys and uploads answer once the copy is published, with a `loading` version; the model
loader (a real Celery worker on the models queue) loads it, or records why it could not."""

import io
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests import live
from tests.conftest import peer_data_or_skip
from tests.factories import ModelVersionFactory, RegisteredModelFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.modelregistry.conftest import (
    HALF_PLUS_THREE,
    HALF_PLUS_TWO,
    api,
    predict,
    register,
    version_loaded,
)
from tfplatform.modelregistry.models import ModelVersion
from tfplatform.modelregistry.services.versions import model_versions_loading_resume

pytestmark = pytest.mark.django_db(transaction=True)


def _half_plus_two_with_broken_variables() -> io.BytesIO:
    """Passes every check on its graph, but its variables cannot be restored."""
    source = peer_data_or_skip() / "tf-serving-testdata" / HALF_PLUS_TWO / "00000123"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                data = path.read_bytes()
                if path.name.startswith("variables.data"):
                    data = data[: len(data) // 2]
                archive.writestr(str(path.relative_to(source)), data)
    buffer.seek(0)
    buffer.name = "broken.zip"
    return buffer


def test_a_version_the_server_cannot_load_is_failed_with_the_servers_reason(
    model_server: dict[str, Any],
) -> None:
    client = api(UserFactory())
    answer = client.post("/api/v1/models/", {"model_name": "broken",
                                             "file": _half_plus_two_with_broken_variables()},
                         format="multipart")
    assert answer.status_code == 202, answer.content  # nothing about the load is known yet
    version = version_loaded(client, "broken", 1)
    assert version["state"] == "failed" and version["error"]
    assert version["labels"] == []
    refused = predict(client, "/api/v1/models/broken:predict", {"instances": [1.0]})
    assert refused.status_code in (404, 503) and refused.json()["error"]


def test_a_loader_started_again_loads_what_was_left_loading(
    model_server: dict[str, Any],
) -> None:
    """As if the loader had died with the message: the version is LOADING and nothing queued."""
    owner = UserFactory()
    model = RegisteredModelFactory(name="orphan", owner=owner)
    path = model_server["base"] / "orphan" / "1"
    shutil.copytree(peer_data_or_skip() / "tf-serving-testdata" / HALF_PLUS_TWO / "00000123",
                    path)
    version = ModelVersionFactory(model=model, version=1, path=str(path),
                                  state=ModelVersion.State.LOADING)

    assert model_versions_loading_resume() == [version.pk]

    client = api(owner)
    assert version_loaded(client, "orphan", 1)["state"] == "available"
    answer = predict(client, "/api/v1/models/orphan:predict", {"instances": [2.0]})
    assert answer.json() == {"predictions": [3.0]}


def test_loading_an_undeployed_version_does_nothing(model_server: dict[str, Any]) -> None:
    from tfplatform.modelregistry.services.versions import model_version_load

    version = ModelVersionFactory(state=ModelVersion.State.UNLOADED,
                                  path=str(Path(model_server["base"]) / "gone" / "1"))
    assert model_version_load(version_id=version.pk) is None
    version.refresh_from_db()
    assert version.state == ModelVersion.State.UNLOADED


def test_only_the_labelled_and_newest_versions_stay_loaded(
    model_server: dict[str, Any], settings: Any,
    platform_settings_override: PlatformSettingsOverride
) -> None:
    platform_settings_override(model_versions_loaded=2)
    client = api(UserFactory())
    for source in (HALF_PLUS_TWO, HALF_PLUS_THREE, HALF_PLUS_TWO, HALF_PLUS_THREE):
        assert register(client, "many", source)["state"] == "available"
    states = {v["version"]: v["state"]
              for v in client.get("/api/v1/models/many/").json()["versions"]}
    # v1 holds `stable` (the first loaded); v3 and v4 are the newest two.
    assert states == {1: "available", 2: "unloaded", 3: "available", 4: "available"}
    # The loader tells the server after it records the states: the list follows shortly.
    config_path = model_server["base"] / "models.config"

    def config_without_v2() -> str:
        text = config_path.read_text()
        return "" if "versions: 2" in text else text

    config = str(live.wait_for(config_without_v2, timeout=30,
                               what="the retired v2 to leave the model list",
                               log=model_server["log"]))
    assert "versions: 1" in config and "versions: 3" in config and "versions: 4" in config
    gone = predict(client, "/api/v1/models/many/versions/2:predict", {"instances": [1.0]})
    assert gone.status_code == 404
    kept = predict(client, "/api/v1/models/many/versions/1:predict", {"instances": [1.0]})
    assert kept.json() == {"predictions": [2.5]}


def test_a_version_published_before_the_server_answers_stays_loading_and_loads_later(
    model_server: dict[str, Any], platform_settings_override: PlatformSettingsOverride,
) -> None:
    """`make run` starts the web app first: an upload seconds later must not fail for good."""
    from tfplatform.modelregistry.services.versions import (
        ModelServerUnreachable,
        model_version_load,
    )
    from tfplatform.modelregistry.tasks import model_version_load_task

    owner = UserFactory()
    model = RegisteredModelFactory(name="early", owner=owner)
    path = model_server["base"] / "early" / "1"
    shutil.copytree(peer_data_or_skip() / "tf-serving-testdata" / HALF_PLUS_TWO / "00000123",
                    path)
    version = ModelVersionFactory(model=model, version=1, path=str(path),
                                  state=ModelVersion.State.LOADING)
    served = platform_settings_override().tf_serving_grpc
    platform_settings_override(tf_serving_grpc=f"127.0.0.1:{live.free_port()}")  # nobody there
    with pytest.raises(ModelServerUnreachable):
        model_version_load(version_id=version.pk)
    version.refresh_from_db()
    assert version.state == ModelVersion.State.LOADING and not version.error
    assert ModelServerUnreachable in model_version_load_task.autoretry_for

    platform_settings_override(tf_serving_grpc=served)  # the server is up now
    loaded = model_version_load(version_id=version.pk)
    assert loaded is not None and loaded.state == ModelVersion.State.AVAILABLE
    answer = predict(api(owner), "/api/v1/models/early:predict", {"instances": [2.0]})
    assert answer.json() == {"predictions": [3.0]}


def test_the_owners_subscribers_hear_that_a_version_is_available_or_failed(
    model_server: dict[str, Any],
) -> None:
    from tfplatform.notifications.models import Delivery, Event
    from tfplatform.notifications.services import SubscriptionRequest, subscription_create

    owner = UserFactory(email="owner@example.com")
    subscription_create(owner=owner, request=SubscriptionRequest(
        events=["deploy.available", "deploy.failed"], email=True))
    client = api(owner)
    assert register(client, "heard")["state"] == "available"
    answer = client.post("/api/v1/models/", {"model_name": "heard-broken",
                                             "file": _half_plus_two_with_broken_variables()},
                         format="multipart")
    assert answer.status_code == 202, answer.content
    assert version_loaded(client, "heard-broken", 1)["state"] == "failed"
    # Published once the loader has taken the failed version off the server's list.
    live.wait_for(lambda: Event.objects.filter(kind="deploy.failed").exists(), timeout=30,
                  what="the deploy.failed event", log=model_server["log"])

    events = {(e.kind, e.payload["model"]): e.payload for e in Event.objects.filter(owner=owner)}
    assert set(events) == {("deploy.available", "heard"), ("deploy.failed", "heard-broken")}
    assert events[("deploy.available", "heard")]["version"] == 1
    assert events[("deploy.failed", "heard-broken")]["error"]
    assert Delivery.objects.filter(recipient=owner, channel="email").count() == 2
