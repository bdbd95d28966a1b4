"""Deploying and predicting through the platform against the embedded TF Serving server."""

import io
import json
import threading
import time
import zipfile
from typing import Any

import pytest
import requests
from rest_framework.test import APIClient

from tests.conftest import peer_data_or_skip
from tests.factories import TeamFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.modelregistry.conftest import (
    HALF_PLUS_THREE,
    HALF_PLUS_TWO,
    api,
    predict,
    register,
    saved_model_zip,
    version_loaded,
)
from tfplatform.accounts.tokens import api_token_issue
from tfplatform.modelregistry.models import ModelVersion

pytestmark = pytest.mark.django_db(transaction=True)


def test_bring_your_own_model_then_predict_like_tf_serving(model_server: dict[str, Any]) -> None:
    owner = UserFactory()
    client = api(owner)
    version = register(client, "half")
    assert version["version"] == 1 and version["state"] == "available"
    assert version["labels"] == ["stable"]

    response = predict(client, "/api/v1/models/half:predict", {"instances": [1.0, 2.0, 5.0]})
    assert response.status_code == 200
    assert response.json() == {"predictions": [2.5, 3.0, 4.5]}
    assert response["X-Model-Version"] == "1"
    columnar = predict(client, "/api/v1/models/half/versions/1:predict", {"inputs": [1.0, 2.0]})
    assert columnar.json() == {"outputs": [2.5, 3.0]}
    labelled = predict(client, "/api/v1/models/half/labels/stable:predict", {"instances": [4.0]})
    assert labelled.json() == {"predictions": [4.0]}

    direct = requests.post(
        f"{model_server['rest']}/v1/models/half:predict",
        json={"instances": [1.0, 2.0, 5.0]},
        headers=model_server["headers"],
        timeout=10,
    )
    assert direct.json() == response.json()
    config = (model_server["base"] / "models.config").read_text()
    assert 'name: "half"' in config


def test_user_b_cannot_predict_or_change_a_private_model(model_server: dict[str, Any]) -> None:
    alice_client = api(UserFactory())
    register(alice_client, "private")
    bob = api(UserFactory())
    denied = predict(bob, "/api/v1/models/private:predict", {"instances": [1.0]})
    assert denied.status_code == 404 and "error" in denied.json()
    assert bob.get("/api/v1/models/private/").status_code == 404
    assert (
        bob.post(
            "/api/v1/models/private/labels/", {"label": "stable", "version": 1}, format="json"
        ).status_code
        == 404
    )
    assert bob.get("/api/v1/models/").json()["results"] == []
    # Taking over the name by registering a version is refused too.
    taken = bob.post(
        "/api/v1/models/",
        {"model_name": "private", "file": saved_model_zip(HALF_PLUS_THREE)},
        format="multipart",
    )
    assert taken.status_code == 409
    assert ModelVersion.objects.filter(model__name="private").count() == 1

    assert (
        alice_client.patch("/api/v1/models/private/", {"public": True}, format="json").status_code
        == 200
    )
    allowed = predict(bob, "/api/v1/models/private:predict", {"instances": [1.0]})
    assert allowed.json() == {"predictions": [2.5]}
    assert bob.patch("/api/v1/models/private/", {"public": False}, format="json").status_code == 403


def test_routing_follows_a_promotion_at_once_and_is_remembered_per_user(
    model_server: dict[str, Any],
) -> None:
    owner = api(UserFactory())
    url = "/api/v1/models/promoted:predict"
    register(owner, "promoted")
    assert predict(owner, url, {"instances": [0.0]})["X-Model-Version"] == "1"  # now remembered
    register(owner, "promoted", HALF_PLUS_THREE)
    moved = owner.post(
        "/api/v1/models/promoted/labels/", {"label": "stable", "version": 2}, format="json"
    )
    assert moved.status_code == 200
    answer = predict(owner, url, {"instances": [0.0]})
    assert answer["X-Model-Version"] == "2" and answer.json() == {"predictions": [3.0]}
    # The owner's remembered route is theirs alone.
    assert predict(api(UserFactory()), url, {"instances": [0.0]}).status_code == 404


def test_team_member_can_predict(model_server: dict[str, Any]) -> None:
    team = TeamFactory()
    register(api(UserFactory(team=team)), "teamed")
    answer = predict(
        api(UserFactory(team=team)), "/api/v1/models/teamed:predict", {"instances": [2.0]}
    )
    assert answer.json() == {"predictions": [3.0]}


@pytest.mark.parametrize(
    ("url", "body", "status", "text"),
    [
        ("/api/v1/models/half:predict", {"instances": ["a"]}, 400, ""),
        ("/api/v1/models/half:predict", {"instances": [1.0], "inputs": [1.0]}, 400, "instances"),
        ("/api/v1/models/half:predict", b"{not json", 400, ""),
        ("/api/v1/models/nope:predict", {"instances": [1.0]}, 404, ""),
        ("/api/v1/models/half/versions/9:predict", {"instances": [1.0]}, 404, ""),
        ("/api/v1/models/half/labels/nolabel:predict", {"instances": [1.0]}, 400, ""),
    ],
)
def test_bad_inference_input_is_4xx_with_tf_serving_error(
    model_server: dict[str, Any], url: str, body: Any, status: int, text: str
) -> None:
    client = api(UserFactory(is_staff=True))
    register(client, "half")
    response = predict(client, url, body)
    assert response.status_code == status, response.content
    assert "error" in response.json()
    assert text in response.json()["error"]


def test_predict_answers_json_whatever_the_client_accepts(model_server: dict[str, Any]) -> None:
    # TF Serving ignores Accept; clients written for it (and browsers' defaults) must not get 406.
    client = api(UserFactory())
    register(client, "half")
    for accept in ("text/html", "application/xml;q=0.9, */*;q=0.1", "image/png"):
        answer = client.post("/api/v1/models/half:predict", data=json.dumps({"instances": [2.0]}),
                             content_type="application/json", HTTP_ACCEPT=accept)
        assert answer.status_code == 200, (accept, answer.content)
        assert answer["Content-Type"] == "application/json"
        assert answer.json() == {"predictions": [3.0]}
    missing = client.post("/api/v1/models/nope:predict", data=b"{}",
                          content_type="application/json", HTTP_ACCEPT="text/html")
    assert missing.status_code == 404
    assert missing["Content-Type"] == "application/json" and "error" in missing.json()


def test_body_over_the_cap_is_413_before_the_model_server(
    model_server: dict[str, Any], settings: Any,
    platform_settings_override: PlatformSettingsOverride
) -> None:
    platform_settings_override(max_predict_bytes=1000)
    client = api(UserFactory())
    register(client, "capped")
    response = predict(client, "/api/v1/models/capped:predict", {"instances": [1.0] * 1000})
    assert response.status_code == 413
    assert "larger than 1000 bytes" in response.json()["error"]


def test_zip_with_traversal_or_links_is_rejected(model_server: dict[str, Any]) -> None:
    client = api(UserFactory())
    for name, member in (
        ("dotdot.zip", "../evil/saved_model.pb"),
        ("abs.zip", "/etc/saved_model.pb"),
    ):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr(member, b"x")
        buffer.seek(0)
        buffer.name = name
        response = client.post(
            "/api/v1/models/", {"model_name": "evil", "file": buffer}, format="multipart"
        )
        assert response.status_code == 400, response.content
        assert "error" in response.json()
    link = io.BytesIO()
    with zipfile.ZipFile(link, "w") as archive:
        info = zipfile.ZipInfo("saved_model.pb")
        info.external_attr = 0o120777 << 16
        archive.writestr(info, "/etc/passwd")
    link.seek(0)
    link.name = "link.zip"
    response = client.post(
        "/api/v1/models/", {"model_name": "evil", "file": link}, format="multipart"
    )
    assert response.status_code == 400
    assert not (model_server["base"] / "evil").exists() or not any(
        (model_server["base"] / "evil").iterdir()
    )


@pytest.fixture
def import_dir(settings: Any, tmp_path: Any,
    platform_settings_override: PlatformSettingsOverride) -> Any:
    folder = tmp_path / "import"
    folder.mkdir()
    platform_settings_override(model_import_dir=folder)
    return folder


def _half_plus_two_in(folder: Any) -> Any:
    import shutil

    source = peer_data_or_skip() / "tf-serving-testdata" / HALF_PLUS_TWO / "00000123"
    target = folder / "half"
    shutil.copytree(source, target)
    for path in (target, *target.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def test_only_staff_register_from_the_import_folder(
    model_server: dict[str, Any], import_dir: Any
) -> None:
    body = {"model_name": "frompath", "path": str(_half_plus_two_in(import_dir))}
    assert api(UserFactory()).post("/api/v1/models/", body, format="json").status_code == 403
    staff = api(UserFactory(is_staff=True))
    answer = staff.post("/api/v1/models/", body, format="json")
    assert answer.status_code == 202, answer.content
    assert version_loaded(staff, "frompath", 1)["state"] == "available"
    assert predict(staff, "/api/v1/models/frompath:predict", {"instances": [0.0]}).json() == {
        "predictions": [2.0]
    }


def test_staff_cannot_register_the_servers_other_files(
    model_server: dict[str, Any], import_dir: Any, tmp_path: Any
) -> None:
    from django.conf import settings

    staff = api(UserFactory(is_staff=True))
    model = _half_plus_two_in(import_dir)
    outside = tmp_path / "outside"
    (outside / "variables").mkdir(parents=True)
    (import_dir / "via-link").symlink_to(outside)
    (model / "variables" / "leak").symlink_to(settings.VAR_DIR / "secret_key")
    attempts = {
        "outside": str(outside),
        "dotdot": f"{import_dir}/../outside",
        "the folder itself": str(import_dir),
        "through a link": str(import_dir / "via-link"),
        "holding a link": str(model),
        "relative": "import/half",
    }
    for what, path in attempts.items():
        answer = staff.post("/api/v1/models/", {"model_name": "stolen", "path": path},
                            format="json")
        assert answer.status_code == 400, (what, answer.content)
        assert "error" in answer.json(), what
    assert not (model_server["base"] / "stolen").exists() or not any(
        (model_server["base"] / "stolen").iterdir())


def test_deploying_another_model_unloads_nothing(model_server: dict[str, Any]) -> None:
    client = api(UserFactory())
    register(client, "first")
    register(client, "second", HALF_PLUS_THREE)
    assert predict(client, "/api/v1/models/first:predict", {"instances": [0.0]}).json() == {
        "predictions": [2.0]
    }
    assert predict(client, "/api/v1/models/second:predict", {"instances": [0.0]}).json() == {
        "predictions": [3.0]
    }


def test_canary_share_routes_traffic_and_says_which_version(model_server: dict[str, Any]) -> None:
    client = api(UserFactory())
    register(client, "canaried")
    register(client, "canaried", HALF_PLUS_THREE)
    assert (
        client.post(
            "/api/v1/models/canaried/labels/", {"label": "canary", "version": 2}, format="json"
        ).status_code
        == 200
    )
    assert (
        client.patch("/api/v1/models/canaried/", {"canary_percent": 50}, format="json").status_code
        == 200
    )
    seen: dict[str, set[float]] = {"1": set(), "2": set()}
    for _ in range(60):
        response = predict(client, "/api/v1/models/canaried:predict", {"instances": [0.0]})
        seen[response["X-Model-Version"]].add(response.json()["predictions"][0])
    assert seen == {"1": {2.0}, "2": {3.0}}


def test_version_swap_and_rollback_under_load_lose_no_request(
    model_server: dict[str, Any], live_server: Any
) -> None:
    owner = UserFactory()
    client = api(owner)
    register(client, "swapped")
    token = APIClient().post(
        "/api/v1/auth/token/",
        {"username": owner.username, "password": "correct-horse-battery-staple"},
        format="json",
    )
    headers = {"Authorization": f"Token {token.json()['token']}"}
    url = f"{live_server.url}/api/v1/models/swapped:predict"
    failures: list[str] = []
    answers: list[float] = []
    stop = threading.Event()

    def hammer() -> None:
        session = requests.Session()
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            response = session.post(url, json={"instances": [0.0]}, headers=headers, timeout=30)
            if response.status_code != 200:
                failures.append(f"{response.status_code} {response.text}")
            else:
                answers.append(response.json()["predictions"][0])

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        register(client, "swapped", HALF_PLUS_THREE)  # version 2, not yet stable
        for version in (2, 1, 2):  # promote, roll back, promote again
            response = client.post(
                "/api/v1/models/swapped/labels/",
                {"label": "stable", "version": version},
                format="json",
            )
            assert response.status_code == 200, response.content
            time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert failures == []
    assert {2.0, 3.0} <= set(answers)
    assert len(answers) > 20


def test_model_server_restarts_from_the_written_config_with_labels(
    model_server: dict[str, Any], tmp_path: Any
) -> None:
    """The config file the platform writes brings a restarted server back to the same state,
    batching as the operator's parameters file says."""
    import sys

    from tests import live

    client = api(UserFactory())
    register(client, "restartable")
    register(client, "restartable", HALF_PLUS_THREE)
    client.post(
        "/api/v1/models/restartable/labels/", {"label": "canary", "version": 2}, format="json"
    )
    config = model_server["base"] / "models.config"
    assert "version_labels" in config.read_text()
    grpc_port, rest_port = live.free_port(), live.free_port()
    log = tmp_path / "restarted.log"
    batching = tmp_path / "batching.config"
    batching.write_text("max_batch_size { value: 2 }\n")
    process = live.start(
        [sys.executable, "manage.py", "serve_models"],
        env=live.child_env(
            MODEL_BASE_PATH=str(model_server["base"]),
            TF_SERVING_GRPC=f"127.0.0.1:{grpc_port}",
            TF_SERVING_REST=f"http://127.0.0.1:{rest_port}",
            TF_SERVING_BATCHING_PARAMETERS_FILE=str(batching),
        ),
        log=log,
    )
    try:
        url = f"http://127.0.0.1:{rest_port}/v1/models/restartable/labels/canary:predict"

        def answers() -> Any:
            try:
                return requests.post(url, json={"instances": [0.0]}, timeout=5,
                                     headers=model_server["headers"]).json()
            except (requests.RequestException, ValueError):
                return None

        body = live.wait_for(
            lambda: (answers() or {}).get("predictions"),
            timeout=90,
            what="the restarted server",
            log=log,
        )
        assert body == [3.0]
        too_many = requests.post(url, json={"instances": [0.0, 1.0, 2.0]}, timeout=5,
                                 headers=model_server["headers"])
        assert too_many.status_code == 400
        assert "larger than maximum input batch size 2" in too_many.json()["error"]
    finally:
        live.stop(process)


def test_inference_is_rate_limited(model_server: dict[str, Any], monkeypatch: Any) -> None:
    from rest_framework.throttling import ScopedRateThrottle

    from tfplatform.core.throttling import ScopedWindowRateThrottle

    monkeypatch.setitem(ScopedRateThrottle.THROTTLE_RATES, "inference", "3/min")
    # Counted per fixed minute: five requests straddling a minute's end would start a new count.
    monkeypatch.setattr(ScopedWindowRateThrottle, "timer", lambda self: 1_800_000_030.0)
    client = api(UserFactory())
    register(client, "limited")
    codes = [
        predict(client, "/api/v1/models/limited:predict", {"instances": [1.0]}).status_code
        for _ in range(5)
    ]
    assert codes == [200, 200, 200, 429, 429]


def test_model_page_promotes_rolls_back_and_undeploys(model_server: dict[str, Any]) -> None:
    from django.test import Client

    owner = UserFactory()
    client = api(owner)
    register(client, "paged")
    register(client, "paged", HALF_PLUS_THREE)
    page = Client()
    page.force_login(owner)
    html = page.get("/models/paged/").content.decode()
    assert "Make stable" in html and "Try it" in html
    action = "/models/paged/action/"
    page.post(action, {"action": "promote", "version": 2})
    assert client.get("/api/v1/models/paged/").json()["labels"] == {"stable": 2}
    page.post(action, {"action": "promote", "version": 1})  # roll back
    assert client.get("/api/v1/models/paged/").json()["labels"] == {"stable": 1}
    page.post(action, {"action": "canary", "version": 2})
    page.post(action, {"action": "canary_percent", "canary_percent": 25})
    detail = client.get("/api/v1/models/paged/").json()
    assert detail["labels"] == {"stable": 1, "canary": 2} and detail["canary_percent"] == 25
    page.post(action, {"action": "undeploy", "version": 2})
    detail = client.get("/api/v1/models/paged/").json()
    assert detail["labels"] == {"stable": 1}
    assert [v["state"] for v in detail["versions"]] == ["unloaded", "available"]
    assert (
        predict(client, "/api/v1/models/paged/versions/2:predict", {"instances": [1.0]}).status_code
        == 404
    )
    assert predict(client, "/api/v1/models/paged:predict", {"instances": [0.0]}).json() == {
        "predictions": [2.0]
    }
    stranger = Client()
    stranger.force_login(UserFactory())
    assert stranger.get("/models/paged/").status_code == 404
    assert stranger.post(action, {"action": "undeploy", "version": 1}).status_code == 404


def test_tf_servings_rest_api_through_the_platform_with_a_token(
    model_server: dict[str, Any], live_server: Any
) -> None:
    """A TF Serving REST client pointed at {platform}/api with the user's platform token:
    classify, regress, model status and metadata answer as the model server's own."""
    owner = UserFactory()
    register(api(owner), "half")  # half_plus_two: classify_x_to_y, regress_x_to_y
    _, token = api_token_issue(user=owner, name="tf-serving-client")
    base = f"{live_server.url}/api/v1/models/half"
    with requests.Session() as http:
        http.headers["Authorization"] = f"Token {token}"
        classify = http.post(f"{base}:classify", timeout=30, json={
            "signature_name": "classify_x_to_y", "examples": [{"x": 20.0}]})
        assert classify.status_code == 200 and classify.json() == {"results": [[["", 12.0]]]}
        assert classify.headers["X-Model-Version"] == "1"
        regress = http.post(f"{base}/versions/1:regress", timeout=30, json={
            "signature_name": "regress_x_to_y", "examples": [{"x": 80.0}, {"x": 2.0}]})
        assert regress.json() == {"results": [42.0, 3.0]}
        labelled = http.post(f"{base}/labels/stable:regress", timeout=30, json={
            "signature_name": "regress_x_to_y", "context": {"x": 4.0}, "examples": [{}]})
        assert labelled.json() == {"results": [4.0]}
        status = {"model_version_status": [{"version": "1", "state": "AVAILABLE",
                                            "status": {"error_code": "OK", "error_message": ""}}]}
        for where in ("", "/versions/1", "/labels/stable"):
            assert http.get(f"{base}{where}", timeout=30).json() == status, where
        # TF Serving's own answer for this model, less the name and version it was served as.
        expected = json.loads((peer_data_or_skip() / "tf-serving-testdata"
                               / "half_plus_two_model_metadata.json").read_text())
        expected["model_spec"].update(name="half", version="1")
        for where in ("", "/versions/1", "/labels/stable"):
            metadata = http.get(f"{base}{where}/metadata", timeout=30)
            assert metadata.status_code == 200 and metadata.json() == expected, where
        missing = http.get(f"{base}/versions/9/metadata", timeout=30)
        assert missing.status_code == 404 and "error" in missing.json()

        http.headers["Authorization"] = f"Token {api_token_issue(user=UserFactory(), name='b')[1]}"
        for method, where in (("POST", ":classify"), ("POST", "/versions/1:regress"),
                              ("GET", ""), ("GET", "/labels/stable"), ("GET", "/metadata"),
                              ("GET", "/versions/1/metadata")):
            denied = http.request(method, f"{base}{where}", timeout=30, json={})
            # The answer for a name nobody has: B learns nothing of A's model.
            never = http.request(method, f"{base.replace('half', 'nohalf')}{where}",
                                 timeout=30, json={})
            assert denied.status_code == never.status_code == 404, where
            assert denied.json() == {**never.json(), "error": never.json()["error"].replace(
                "nohalf", "half")}, where
