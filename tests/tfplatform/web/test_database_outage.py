"""The database goes away under a running web process (gunicorn, as deployed) and comes back:
meanwhile the API answers 503 with its JSON error and Retry-After, pages a 503 page, the health
check 503; afterwards everything answers again, with no restart of the web process."""

from pathlib import Path

import pytest
import requests

from bench.stack import web_args
from tests import live

pytestmark = pytest.mark.slow

PASSWORD = "a-long-pass-phrase"


def test_with_the_database_away_answers_are_503_and_it_recovers_without_a_restart(
    postgres: live.Postgres, tmp_path: Path
) -> None:
    env = live.platform_env(database_url=postgres.url, var_dir=tmp_path / "var")
    live.manage("migrate", "--noinput", env=env)
    live.user_create(username="ada", password=PASSWORD, env=env)
    port = live.free_port()
    base = f"http://127.0.0.1:{port}"
    web = live.start(web_args(port=port), env=env, log=tmp_path / "web.log")
    try:
        live.wait_for(lambda: live.http_status(f"{base}/healthz") == 200, timeout=60,
                      what="the web app",
                      log=tmp_path / "web.log")
        token = requests.post(f"{base}/api/v1/auth/token/", timeout=10, json={
            "username": "ada", "password": PASSWORD}).json()["token"]
        api = requests.Session()
        api.headers["Authorization"] = f"Token {token}"
        browser = requests.Session()
        browser.get(f"{base}/login/", timeout=10)
        signed_in = browser.post(f"{base}/login/", timeout=10, data={
            "username": "ada", "password": PASSWORD,
            "csrfmiddlewaretoken": browser.cookies["csrftoken"]}, headers={"Referer": base})
        assert signed_in.ok and "sessionid" in browser.cookies
        assert api.get(f"{base}/api/v1/experiments/", timeout=10).status_code == 200

        postgres.stop()
        away = api.get(f"{base}/api/v1/experiments/", timeout=30)
        assert away.status_code == 503, away.text[:500]
        assert away.json()["code"] == "unavailable" and away.json()["error"]
        assert int(away.headers["Retry-After"]) > 0
        page = browser.get(f"{base}/experiments/", timeout=30)
        assert page.status_code == 503 and 'id="unavailable"' in page.text
        assert live.http_status(f"{base}/healthz") == 503

        postgres.start()
        live.wait_for(lambda: live.http_status(f"{base}/healthz") == 200, timeout=60,
                      what="the web app to reach its database again")
        assert api.get(f"{base}/api/v1/experiments/", timeout=10).status_code == 200
        assert browser.get(f"{base}/experiments/", timeout=10).status_code == 200
    finally:
        live.stop(web)

