"""docker-compose.yml started for real: `podman-compose up` of the Dockerfile's image and Debian's
PostgreSQL, Redis, Caddy and Prometheus (tests/deploy/compose/podman.yml says what it replaces).

As an operator would: up, wait for every health check, make the first account with the
documented bootstrap, then through Caddy's TLS (its own CA) train, deploy, predict and open a
workspace; restart the stack on its volumes and find all of it still there."""

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests import live
from tests.deploy.compose_images import COMPOSE_DIR, ROOT, images_build, tools_or_skip

# The engine's images and a stack of its own: one worker, alone.
pytestmark = [pytest.mark.xdist_group("compose"), pytest.mark.slow]

SECRETS = ("django_secret_key", "postgres_password", "redis_password", "serving_access_token",
           "metrics_token", "grafana_admin_password")
# Those with a health check in docker-compose.yml, all started without a profile or with
# `monitoring` (worker-gpu and grafana are left out here).
CHECKED = {"postgres", "redis", "web", "lab", "proxy", "model-loader", "scheduler",
           "worker-cpu", "tfserving", "gateway", "prometheus"}
DIGIT = [[0.0] * 64]


def _healthcheck_passes(container: str) -> bool:
    # One that does not answer within the minute (a loaded machine: the check is a Python
    # process) is not healthy yet, as for the engine; the caller asks again.
    try:
        return subprocess.run(["podman", "healthcheck", "run", container], capture_output=True,
                              check=False, timeout=60).returncode == 0
    except subprocess.TimeoutExpired:
        return False


class Stack:
    """One compose project: its command line, containers and the proxy's addresses."""

    def __init__(self, *, folder: Path, images: dict[str, str]) -> None:
        self.project = f"tfpc{os.getpid()}"
        self.secrets = {name: secrets.token_urlsafe(32) for name in SECRETS}
        (folder / "secrets").mkdir()
        for name, value in self.secrets.items():
            (folder / "secrets" / name).write_text(value)
        https, lab, self.grpc_port = live.free_port(), live.free_port(), live.free_port()
        self.base, self.lab = f"https://localhost:{https}", f"https://localhost:{lab}"
        self.http = f"http://localhost:{live.free_port()}"
        self.env = {key: value for key, value in os.environ.items()
                    if key not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL")}
        self.env |= {
            # Compose refuses to start without these named; the override reads the files.
            "DJANGO_SECRET_KEY": "from-the-file", "POSTGRES_PASSWORD": "from-the-file",
            "REDIS_PASSWORD": "from-the-file", "TF_SERVING_ACCESS_TOKEN": "from-the-file",
            "PLATFORM_METRICS_TOKEN": self.secrets["metrics_token"],
            "TFP_COMPOSE_SECRETS": str(folder / "secrets"),
            "PLATFORM_HTTP_PORT": self.http.rsplit(":", 1)[1], "PLATFORM_HTTPS_PORT": str(https),
            "PLATFORM_LAB_PORT": str(lab), "DJANGO_CSRF_TRUSTED_ORIGINS": self.base,
            "PLATFORM_SERVING_GRPC_PORT": str(self.grpc_port),
            **{f"TFP_COMPOSE_{name.upper()}_IMAGE": tag for name, tag in images.items()},
        }
        self.ca = folder / "caddy-root.crt"
        self.log = folder / "compose.log"

    def compose(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [str(Path(sys.executable).with_name("podman-compose")), "-p", self.project,
             "--profile", "monitoring", "-f", str(ROOT / "docker-compose.yml"),
             "-f", str(COMPOSE_DIR / "podman.yml"), *args],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        with self.log.open("a") as log:
            log.write(f"$ podman-compose {' '.join(args)}\n{done.stdout}{done.stderr}\n")
        assert done.returncode == 0, f"podman-compose {args} failed:\n{done.stderr[-4000:]}"
        return done.stdout

    def up(self) -> None:
        # --no-deps: podman 4.3 cannot start a container whose `--requires` has requirements of
        # its own ("not found in input list"); compose still starts them in dependency order.
        self.compose("up", "-d", "--no-deps")
        live.wait_for(self.unhealthy_none, timeout=400, what="every health check",
                      log=self.log)
        live.wait_for(self.tls_ready, timeout=60, what="Caddy's certificate", log=self.log)

    def containers(self) -> dict[str, dict[str, Any]]:
        found = subprocess.run(
            ["podman", "ps", "-a", "--format", "json", "--filter",
             f"label=io.podman.compose.project={self.project}"],
            capture_output=True, text=True, check=True, timeout=60)
        return {c["Labels"]["com.docker.compose.service"]: c for c in json.loads(found.stdout)}

    def unhealthy_none(self) -> bool:
        """Runs each health check as the engine would (podman 4.3 schedules them with systemd
        timers, and there is no systemd here); `migrate` must have finished well."""
        containers = self.containers()
        assert CHECKED | {"migrate"} <= set(containers), sorted(containers)
        failing = [name for name in sorted(CHECKED)
                   if not _healthcheck_passes(containers[name]["Names"][0])]
        migrate = containers["migrate"]
        if failing or not (migrate["Exited"] and migrate["ExitCode"] == 0):
            with self.log.open("a") as log:
                log.write(f"not yet healthy: {failing}, migrate: {migrate['State']}\n")
            return False
        return True

    def tls_ready(self) -> bool:
        self.ca.write_text(self.exec("proxy", "cat", "/data/caddy/pki/authorities/local/root.crt"))
        try:
            return requests.get(f"{self.base}/healthz", verify=self.ca, timeout=10).ok
        except requests.exceptions.SSLError:
            return False

    def exec(self, service: str, *command: str) -> str:
        name = self.containers()[service]["Names"][0]
        done = subprocess.run(["podman", "exec", name, *command], capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, f"{command} in {service}: {done.stderr[-3000:]}"
        return done.stdout

    def down(self, *, volumes: bool) -> None:
        self.compose("down", *(["-v"] if volumes else []), timeout=300)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tools_or_skip()
    images = images_build()
    made = Stack(folder=tmp_path_factory.mktemp("compose"), images=images)
    try:
        made.up()  # a stack that never got healthy is taken down too
        yield made
    finally:
        made.down(volumes=True)


def _api(stack: Stack, token: str, *, origin: str = "") -> Callable[..., requests.Response]:
    def call(method: str, path: str, **options: Any) -> requests.Response:
        return requests.request(method, f"{origin or stack.base}{path}", verify=stack.ca,
                                timeout=60, headers={"Authorization": f"Token {token}"},
                                **options)
    return call


# Setup included: a machine's first run builds every image (measured: 9:46 while the rest of
# the suite ran beside it).
@pytest.mark.timeout(1800)
def test_the_compose_stack_trains_serves_opens_a_lab_and_keeps_it_all_across_a_restart(
    stack: Stack,
) -> None:
    # The first account, as the deployment guide says to make it.
    printed = stack.compose("exec", "web", "python", "manage.py", "platform_bootstrap")
    password = re.search(r"Created admin account 'admin' with password: ([\w-]+)", printed)
    assert password, printed
    signed = requests.post(f"{stack.base}/api/v1/auth/token/", verify=stack.ca, timeout=60,
                           json={"username": "admin", "password": password.group(1)})
    assert signed.status_code == 200, signed.text
    api = _api(stack, signed.json()["token"])
    lab = _api(stack, signed.json()["token"], origin=stack.lab)
    # Plain HTTP is only a redirect to TLS; no secret is in a container's configuration.
    assert requests.get(f"{stack.http}/", allow_redirects=False, timeout=30).status_code in (
        301, 308)
    inspected = subprocess.run(["podman", "inspect", *[c["Id"] for c in
                                                       stack.containers().values()]],
                               capture_output=True, text=True, check=True, timeout=60).stdout
    # (The metrics token is the exception: compose has no optional secret, and it is optional.)
    assert not [name for name, value in stack.secrets.items()
                if value in inspected and name != "metrics_token"]

    created = api("POST", "/api/v1/experiments/", json={
        "name": "compose", "model": "mlp", "dataset": "digits",
        "hyperparameters": {"epochs": 2, "batch_size": 32, "learning_rate": 0.01}})
    assert created.status_code == 201, created.text
    experiment = created.json()["id"]
    live.wait_for(lambda: api("GET", f"/api/v1/experiments/{experiment}/").json()["state"]
                  in live.FINISHED, timeout=400, what="training in worker-cpu", log=stack.log)
    detail = api("GET", f"/api/v1/experiments/{experiment}/").json()
    assert detail["state"] == "completed", detail

    deployed = api("POST", f"/api/v1/experiments/{experiment}/deploy/",
                   json={"model_name": "digits"})
    assert deployed.status_code == 202, deployed.text
    live.wait_for(lambda: _version_state(api) == "available", timeout=300,
                  what="the model in tfserving", log=stack.log)
    answer = api("POST", "/api/v1/models/digits:predict", json={"instances": DIGIT})
    assert answer.status_code == 200, answer.text
    predictions = answer.json()["predictions"]
    assert len(predictions[0]["probabilities"]) == 10
    _direct_calls_through_the_gateway(stack, token=signed.json()["token"], predictions=predictions)

    opened = api("POST", "/api/v1/workspaces/", json={"name": "lab", "gpus": 0})
    assert opened.status_code == 201, opened.text
    workspace = opened.json()["id"]
    _workspace_wait_running(stack, api, workspace)
    note = f"/workspaces/{workspace}/lab/api/contents/note.txt"
    written = lab("PUT", note, json={"type": "file", "format": "text", "content": "kept"})
    assert written.status_code == 201, written.text

    # Prometheus (the `monitoring` profile) scrapes the platform with its token, and the model
    # server.
    live.wait_for(lambda: _scraped(stack) >= {"platform", "tfserving"}, timeout=120,
                  what="Prometheus to scrape the platform and tfserving", log=stack.log)

    # Stopped and started again on the same volumes: accounts, runs, models and homes remain.
    stack.down(volumes=False)
    stack.up()
    assert api("GET", f"/api/v1/experiments/{experiment}/").json()["state"] == "completed"
    live.wait_for(lambda: _version_state(api) == "available", timeout=300,
                  what="the model loaded again", log=stack.log)
    again = api("POST", "/api/v1/models/digits:predict", json={"instances": DIGIT})
    assert again.status_code == 200 and again.json()["predictions"] == predictions, again.text
    # The workspace's Jupyter went with its node; started again, it finds its home as it was.
    after = api("GET", f"/api/v1/workspaces/{workspace}/").json()
    assert after["state"] == "stopped" or (after["state"] == "failed" and after["error"]), after
    assert api("POST", f"/api/v1/workspaces/{workspace}/start/").status_code == 200
    _workspace_wait_running(stack, api, workspace)
    kept = lab("GET", f"{note}?content=1")
    assert kept.status_code == 200 and kept.json()["content"] == "kept", kept.text


def _scraped(stack: Stack) -> set[str]:
    """The jobs whose every target Prometheus found up."""
    found = json.loads(stack.exec("prometheus", "wget", "-q", "-O", "-",
                                  "http://127.0.0.1:9090/api/v1/targets"))
    jobs: dict[str, bool] = {}
    for target in found["data"]["activeTargets"]:
        job = target["labels"]["job"]
        jobs[job] = jobs.get(job, True) and target["health"] == "up"
    return {job for job, up in jobs.items() if up}


def _version_state(api: Callable[..., requests.Response]) -> str:
    versions = api("GET", "/api/v1/models/digits/").json()["versions"]
    assert versions[0]["state"] != "failed", versions
    return str(versions[0]["state"])


def _workspace_wait_running(stack: Stack, api: Callable[..., requests.Response],
                            workspace: int) -> None:
    def running() -> bool:
        found = api("GET", f"/api/v1/workspaces/{workspace}/").json()
        assert found["state"] not in ("failed", "stopped"), found
        return bool(found["state"] == "running")

    live.wait_for(running, timeout=300, what="JupyterLab in worker-cpu", log=stack.log)


def _direct_calls_through_the_gateway(stack: Stack, *, token: str,
                                      predictions: list[Any]) -> None:
    """TF Serving's own REST shape and gRPC client with the user's platform token, through the
    proxy's TLS to the gateway and on to stock TF Serving's stand-in; nobody else gets in."""
    import grpc
    from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

    shown = _api(stack, token)("GET", "/api/v1/serving/").json()
    assert shown == {"grpc": f"localhost:{stack.grpc_port}", "rest": stack.base}, shown

    def direct(key: str) -> requests.Response:
        return requests.post(f"{stack.base}/v1/models/digits:predict", verify=stack.ca,
                             timeout=60, json={"instances": DIGIT},
                             headers={"Authorization": f"Bearer {key}"})

    # The platform pushes the gateway the new token at once, and again every few seconds.
    live.wait_for(lambda: direct(token).status_code == 200, timeout=60,
                  what="the gateway to take the token", log=stack.log)
    answer = direct(token)
    assert answer.json()["predictions"] == predictions and answer.headers["X-Model-Version"]
    refused = direct("tfp_not_a_token")
    assert refused.status_code == 401 and "error" in refused.json()

    credentials = grpc.ssl_channel_credentials(root_certificates=stack.ca.read_bytes())
    with grpc.secure_channel(f"localhost:{stack.grpc_port}", credentials) as channel:
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = "digits"
        status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
            request, timeout=60, metadata=(("authorization", f"Bearer {token}"),))
        assert [v.state for v in status.model_version_status] == [
            get_model_status_pb2.ModelVersionStatus.AVAILABLE]
        with pytest.raises(grpc.RpcError) as unknown:
            model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
                request, timeout=60, metadata=(("authorization", "Bearer tfp_nobody"),))
        assert unknown.value.code() == grpc.StatusCode.UNAUTHENTICATED
