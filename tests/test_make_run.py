"""`make run` on embedded defaults: SQLite, filesystem broker, one node, embedded model server."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests

from serving.access import access_token_derive
from tests import live

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "make-run-admin-password-123"


def test_make_run_serves_ui_and_api_and_trains_then_stops_cleanly(tmp_path: Path) -> None:
    port, grpc, rest = live.free_port(), live.free_port(), live.free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL")
    }
    env |= {
        "PLATFORM_VAR_DIR": str(tmp_path / "var"),
        "PORT": str(port),
        "PLATFORM_ADMIN_PASSWORD": PASSWORD,
        "TF_SERVING_GRPC": f"127.0.0.1:{grpc}",
        "TF_SERVING_REST": f"http://127.0.0.1:{rest}",
        "PLATFORM_NODE_NAME": "make-run-node",
    }
    log = tmp_path / "make-run.log"
    process = subprocess.Popen(
        ["make", "run"],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        live.wait_for(lambda: _ok(f"{base}/healthz"), timeout=180, what="the web server", log=log)
        assert f"http://127.0.0.1:{port}/" in log.read_text()
        assert (tmp_path / "var" / "db.sqlite3").exists()
        assert "Log in" in requests.get(f"{base}/login/", timeout=10).text

        token = requests.post(
            f"{base}/api/v1/auth/token/",
            json={"username": "admin", "password": PASSWORD},
            timeout=10,
        )
        assert token.status_code == 200, token.text
        headers = {"Authorization": f"Token {token.json()['token']}"}
        nodes = requests.get(f"{base}/api/v1/nodes/", headers=headers, timeout=10).json()
        assert [n["hostname"] for n in nodes["results"]] == ["make-run-node"]

        created = requests.post(
            f"{base}/api/v1/experiments/",
            headers=headers,
            timeout=10,
            json={
                "name": "make run smoke",
                "model": "mlp",
                "dataset": "digits",
                "hyperparameters": {"epochs": 2, "batch_size": 32, "learning_rate": 0.01},
            },
        )
        assert created.status_code == 201, created.text
        url = f"{base}/api/v1/experiments/{created.json()['id']}/"

        def finished() -> dict[str, object] | None:
            body = requests.get(url, headers=headers, timeout=10).json()
            return body if body["state"] in ("completed", "failed", "canceled") else None

        body = live.wait_for(finished, timeout=300, what="training to finish", log=log)
        assert isinstance(body, dict) and body["state"] == "completed", body
        # Its TensorBoard, signed in: a process of the web app's, stopped with it below.
        browser = requests.Session()
        browser.get(f"{base}/login/", timeout=10)
        browser.post(f"{base}/login/", timeout=10, data={
            "username": "admin", "password": PASSWORD,
            "csrfmiddlewaretoken": browser.cookies["csrftoken"]})
        board = browser.get(str(body["tensorboard_url"]), timeout=120)
        assert board.status_code == 200 and "<tb-webapp>" in board.text, board.text[-2000:]
        runs = browser.get(f"{board.url}data/runs", timeout=30).json()
        assert runs == [f"{body['id']}-make-run-smoke/train",
                        f"{body['id']}-make-run-smoke/validation"], runs
        # The embedded model server answers the platform's token only.
        model_server = f"http://127.0.0.1:{rest}/v1/models/none"
        assert requests.get(model_server, timeout=10).status_code == 401
        token = access_token_derive(secret=(tmp_path / "var" / "secret_key").read_text().strip())
        rest_status = requests.get(model_server, timeout=10,
                                   headers={"Authorization": f"Bearer {token}"})
        assert rest_status.status_code == 404 and "error" in rest_status.json()
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _group_alive(process.pid):
        time.sleep(0.5)
    assert not _group_alive(process.pid), "processes were left running after Ctrl-C"


def _ok(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
