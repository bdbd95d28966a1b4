"""The model server goes away under inference load and comes back: meanwhile the platform
answers 503 with Retry-After and its JSON error, never a 500; on its return every deployed
version answers again from the config the platform persisted, labels and canary share intact."""

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from subprocess import Popen
from typing import Any

import pytest
import requests
from django.db import connection

from tests import live
from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.modelregistry.conftest import HALF_PLUS_THREE, api, predict, register
from tfplatform.modelregistry.services.sync import model_config_ensure

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class Server:
    """The embedded model server as `manage.py serve_models` starts it, stopped and started
    again by the test on the same ports and config."""

    def __init__(self, *, base: Path, grpc_port: int, rest_port: int, log: Path) -> None:
        self.base, self.log = base, log
        self.grpc, self.rest = f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{rest_port}"
        self.process: Popen[bytes] | None = None

    def start(self, *, headers: dict[str, str]) -> None:
        self.process = live.start(
            [sys.executable, "manage.py", "serve_models"],
            env=live.child_env(MODEL_BASE_PATH=str(self.base), TF_SERVING_GRPC=self.grpc,
                               TF_SERVING_REST=self.rest),
            log=self.log,
        )
        live.wait_for(lambda: self._answers(headers=headers), timeout=90,
                      what="the model server", log=self.log)

    def stop(self) -> None:
        if self.process is not None:
            live.stop(self.process)
            self.process = None

    def _answers(self, *, headers: dict[str, str]) -> bool:
        try:
            return requests.get(f"{self.rest}/v1/models/none", timeout=2,
                                headers=headers).status_code == 404
        except requests.RequestException:
            return False


@pytest.fixture
def server(settings: Any, tmp_path: Path, model_loader: None,
    platform_settings_override: PlatformSettingsOverride) -> Iterator[Server]:
    base = tmp_path / "models"
    base.mkdir()
    running = Server(base=base, grpc_port=live.free_port(), rest_port=live.free_port(),
                     log=tmp_path / "model-server.log")
    platform_settings_override(
        model_base_path=base,
        tf_serving_grpc=running.grpc,
        tf_serving_rest=running.rest,
    )
    model_config_ensure()
    headers = {"Authorization": f"Bearer {settings.PLATFORM.tf_serving_access_token}"}
    running.start(headers=headers)
    yield running
    running.stop()


def test_while_the_model_server_is_away_predict_is_a_503_with_retry_after_and_it_returns_whole(
    server: Server, settings: Any
) -> None:
    client = api(UserFactory())
    assert register(client, "steady")["state"] == "available"  # version 1, stable
    assert register(client, "steady", HALF_PLUS_THREE)["state"] == "available"
    labelled = client.post("/api/v1/models/steady/labels/", {"label": "canary", "version": 2},
                           format="json")
    assert labelled.status_code == 200, labelled.content
    assert client.patch("/api/v1/models/steady/", {"canary_percent": 25},
                        format="json").status_code == 200

    answers: list[tuple[float, int, dict[str, Any], str | None]] = []
    stop = threading.Event()

    def load() -> None:
        try:
            while not stop.is_set():
                reply = predict(client, "/api/v1/models/steady/versions/1:predict",
                                {"instances": [2.0]})
                answers.append((time.monotonic(), reply.status_code, reply.json(),
                                reply.headers.get("Retry-After")))
                time.sleep(0.02)
        finally:
            connection.close()  # this thread's own

    def seen(status: int, *, after: float) -> bool:
        return any(code == status and at > after for at, code, _, _ in answers)

    loader = threading.Thread(target=load)
    loader.start()
    try:
        live.wait_for(lambda: seen(200, after=0), timeout=30, what="answers under load")
        gone = time.monotonic()
        server.stop()
        live.wait_for(lambda: seen(503, after=gone), timeout=30, what="a 503 while it is away")
        time.sleep(1)  # more requests land on the missing server
        back = time.monotonic()
        headers = {"Authorization": f"Bearer {settings.PLATFORM.tf_serving_access_token}"}
        server.start(headers=headers)
        live.wait_for(lambda: seen(200, after=back), timeout=90, what="answers again",
                      log=server.log)
    finally:
        stop.set()
        loader.join(timeout=60)

    statuses = {code for _, code, _, _ in answers}
    assert statuses == {200, 503}, statuses  # never a 500
    for _, code, body, retry_after in answers:
        if code == 503:
            assert body["code"] == "unavailable" and body["error"]
            assert retry_after is not None and int(retry_after) > 0
        else:
            assert body == {"predictions": [3.0]}  # half plus two
    # Back whole from the persisted config: both versions, the labels, the canary share.
    assert predict(client, "/api/v1/models/steady/labels/stable:predict",
                   {"instances": [2.0]}).json() == {"predictions": [3.0]}
    assert predict(client, "/api/v1/models/steady/labels/canary:predict",
                   {"instances": [2.0]}).json() == {"predictions": [4.0]}  # half plus three
    model = client.get("/api/v1/models/steady/").json()
    assert [v["state"] for v in model["versions"]] == ["available", "available"]
    assert model["labels"] == {"stable": 1, "canary": 2} and model["canary_percent"] == 25
