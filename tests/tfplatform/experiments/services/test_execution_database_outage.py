"""The database (a PostgreSQL of the test's own) goes away for 15 s while a trial trains: the
trial trains on, its node keeps the events and writes them in order when the database is back,
records how the trial ended once it can, and is not taken for lost; no epoch is missing or
repeated, the trial runs once and holds nothing afterwards."""

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from bench.stack import web_args
from tests import live
from tests.paced_model import PACED_MODULE

pytestmark = pytest.mark.slow

PASSWORD = "a-long-pass-phrase"
# The outage outlasts the time a silent node has (with a beat a second) more than twice over:
# a node judged by its last beat before the outage would be lost. Longer adds only waiting.
OUTAGE_SECONDS = 15
NODE_LOST_SECONDS = 6


def test_a_trial_trains_through_a_database_outage_and_loses_no_epoch(
    postgres: live.Postgres, tmp_path: Path
) -> None:
    env = live.platform_env(database_url=postgres.url, var_dir=tmp_path / "var",
                            PLATFORM_NODE_LOST_SECONDS=str(NODE_LOST_SECONDS),
                            PLATFORM_HEARTBEAT_SECONDS="1")
    live.manage("migrate", "--noinput", env=env)
    # The account is made while the processes start: each is a Django start of its own.
    helper = ThreadPoolExecutor(max_workers=1)
    account = helper.submit(live.user_create, username="ada", password=PASSWORD, env=env)
    port = live.free_port()
    base = f"http://127.0.0.1:{port}"
    logs = {name: tmp_path / f"{name}.log" for name in ("web", "scheduler", "worker")}
    processes = [
        live.start(web_args(port=port), env=env, log=logs["web"]),
        live.start([*live.WORKER_ARGS[:2], "scheduler", "--interval", "0.5"], env=env,
                   log=logs["scheduler"]),
        live.start([*live.WORKER_ARGS, "--node", "steady", "--cpu-slots", "1"], env=env,
                   log=logs["worker"]),
    ]
    api = requests.Session()
    try:
        live.wait_for(lambda: live.http_status(f"{base}/healthz") == 200, timeout=60,
                      what="the web app",
                      log=logs["web"])
        account.result()
        token = requests.post(f"{base}/api/v1/auth/token/", timeout=10, json={
            "username": "ada", "password": PASSWORD}).json()["token"]
        api.headers["Authorization"] = f"Token {token}"
        # Paced training goes on into the outage, and may end in it (how it ended is then
        # recorded once the database is back).
        answer = api.post(f"{base}/api/v1/experiments/", timeout=30, data={
            "name": "through the outage", "model": "upload", "dataset": "digits",
            "hyperparameters": json.dumps({"epochs": 8})},
            files={"model_file": ("paced.py", PACED_MODULE)})
        assert answer.status_code == 201, answer.text
        experiment_id = answer.json()["id"]
        live.wait_for(lambda: len(_epochs(api, base, experiment_id)) >= 2, timeout=180,
                      what="two epochs before the outage", log=logs["worker"])

        postgres.stop()
        time.sleep(OUTAGE_SECONDS)  # the outage itself: what is checked is the state after it
        postgres.start()
        back = time.monotonic()

        live.wait_for(lambda: _state(api, base, experiment_id) in ("completed", "failed"),
                      timeout=300, what="the experiment to finish", log=logs["worker"])
        # Past the time a node has to beat again after the outage (counted from the database's
        # return, whether training ended in the outage or after it): still alive.
        time.sleep(max(0.0, back + NODE_LOST_SECONDS + 2 - time.monotonic()))
        detail = api.get(f"{base}/api/v1/experiments/{experiment_id}/", timeout=10).json()
        nodes = api.get(f"{base}/api/v1/nodes/", timeout=10).json()["results"]
        epochs = _epochs(api, base, experiment_id)
    finally:
        live.stop_all(processes)
        helper.shutdown()

    worker_log = logs["worker"].read_text()
    assert detail["state"] == "completed", (detail.get("error"), worker_log[-3000:])
    assert [t["state"] for t in detail["trials"]] == ["completed"]  # once, never restarted
    assert epochs == list(range(1, 9))
    assert [node["state"] for node in nodes] == ["ready"]
    assert "the database is unavailable" in worker_log  # the outage did reach the trial


def _state(api: requests.Session, base: str, experiment_id: int) -> str:
    answer = api.get(f"{base}/api/v1/experiments/{experiment_id}/", timeout=10)
    return str(answer.json().get("state")) if answer.ok else ""


def _epochs(api: requests.Session, base: str, experiment_id: int) -> list[int]:
    answer = api.get(f"{base}/api/v1/experiments/{experiment_id}/metrics/?name=val_accuracy",
                     timeout=10)
    return [m["epoch"] for m in answer.json()] if answer.ok else []
