"""Three hosts, as deployment.md lays a cluster out: network namespaces on one bridge, each with
var folders of its own and only the folders a cluster shares in common (shared/).

- A: PostgreSQL and Redis (listening on A's address only), the web app with the lab (uvicorn,
  ASGI), the scheduler, the model loader and the model server (on A's loopback).
- B and C: a worker node each, which reach A's database and broker over the link, and relay
  their workspaces' Jupyter to A's lab (PLATFORM_WORKSPACE_RELAY_PORT); homes are their own.

A gang across B and C trains under MultiWorkerMirroredStrategy; C is killed mid-training and
the gang resumes from its checkpoint once C is back. The model it trained is deployed and
served from A. A workspace scheduled on B opens through A's web app (through B's relay: its
socket is in B's own homes). The test's own requests
reach A from a thread that entered A's network namespace: nothing of it is on the machine's.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests import live
from tests.netns import machines_on_a_bridge

# Host-wide network namespaces and bridges: one worker runs these, in turn.
pytestmark = [pytest.mark.xdist_group("netns"), pytest.mark.slow]

LINK = "10.233.0"
ADDRESS = {"a": f"{LINK}.1", "b": f"{LINK}.2", "c": f"{LINK}.3"}
RELAY_PORT = 8790
CLONE_NEWNET = 0x40000000
PASSWORD = "three-hosts-pass-phrase"


@pytest.fixture
def hosts() -> Iterator[dict[str, str]]:
    """Network namespaces a, b and c on one bridge (in a namespace of its own)."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root: the test makes its hosts as network namespaces")
        pytest.skip("making network namespaces needs root")
    with machines_on_a_bridge(prefix=f"tfh{secrets.token_hex(3)}", addresses=ADDRESS) as names:
        yield names


def _on(netns: str, args: list[str]) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{netns}", "--", *args]


class Client:
    """HTTP to A from a thread that entered A's network namespace (setns is per thread)."""

    def __init__(self, *, netns: str, base: str) -> None:
        self.base = base
        self.session = requests.Session()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                          initializer=self._enter,
                                                          initargs=(netns,))

    @staticmethod
    def _enter(netns: str) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns")
        finally:
            os.close(fd)

    def call(self, method: str, path: str, **options: Any) -> requests.Response:
        options.setdefault("timeout", 30)
        return self.pool.submit(self.session.request, method, self.base + path,
                                **options).result()

    def status(self, path: str) -> int:
        try:
            return self.call("GET", path, timeout=5).status_code
        except requests.RequestException:
            return 0


class Cluster:
    def __init__(self, *, hosts: dict[str, str], root: Path) -> None:
        self.hosts, self.root = hosts, root
        # Short: a workspace's sockets live in its home and its attempt's run folder, and a Unix
        # socket's path has 108 bytes.
        self.folders = Path(tempfile.mkdtemp(prefix="tfh-", dir="/tmp"))
        self.shared = self.folders / "shared"
        self.secret = secrets.token_urlsafe(48)
        # The cluster's secrets as files, as compose hands them over.
        (root / "secrets").mkdir(mode=0o700)
        self.redis_password = root / "secrets" / "redis_password"
        self.redis_password.write_text(secrets.token_hex(16) + "\n")
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.postgres: live.Postgres | None = None
        self.api = Client(netns=hosts["a"], base=f"http://{ADDRESS['a']}:8000")

    def env(self, host: str) -> dict[str, str]:
        own, shared, a = self.folders / host, self.shared, ADDRESS["a"]
        env = live.platform_env(
            database_url=f"postgres://postgres@{a}:5432/platform", var_dir=own / "var",
            CELERY_BROKER_URL=f"redis://{a}:6379/0", CACHE_URL=f"rediscache://{a}:6379/1",
            DJANGO_SECRET_KEY=self.secret, REDIS_PASSWORD_FILE=str(self.redis_password),
            DJANGO_ALLOWED_HOSTS=f"{a},localhost,127.0.0.1",
            PLATFORM_RUN_DIR=str(own / "runs"), PLATFORM_ENVIRONMENTS_DIR=str(own / "envs"),
            PLATFORM_WORK_DIR=str(shared / "work"), PLATFORM_MEDIA_ROOT=str(shared / "uploads"),
            DATASETS_DIR=str(shared / "datasets"), PLATFORM_SHARED_DIR=str(shared / "shared"),
            PLATFORM_DATASET_ROOTS=str(shared / "data"),
            # Homes are the nodes' own: the lab reaches a session through its node's relay.
            PLATFORM_HOME_DIR=str(own / "homes"), PLATFORM_WORKSPACE_RELAY_PORT=str(RELAY_PORT),
            MODEL_BASE_PATH=str(shared / "models"),
            TF_SERVING_GRPC="127.0.0.1:8500", TF_SERVING_REST="http://127.0.0.1:8501",
            PLATFORM_WORKSPACE_API_URL=f"http://{a}:8000",
            PLATFORM_NODE_ADDRESS=ADDRESS[host],
        )
        for name in ("PLATFORM_TASK_FORK_SERVER_SOCKET", "PLATFORM_BROKER_KEY_PREFIX",
                     "PLATFORM_CACHE_KEY_PREFIX"):
            env.pop(name, None)  # each host has its own fork server, broker and cache
        return env

    def start(self, name: str, host: str, args: list[str]) -> None:
        self.processes[name] = live.start(_on(self.hosts[host], args), env=self.env(host),
                                          log=self.root / f"{name}.log")

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def database_start(self) -> None:
        self.postgres = live.Postgres(port=5432, address=ADDRESS["a"], netns=self.hosts["a"],
                                      trusted=f"{LINK}.0/24")

    def manage(self, host: str, *args: str) -> str:
        return subprocess.run(_on(self.hosts[host], [sys.executable, "manage.py", *args]),
                              cwd=live.ROOT, env=self.env(host), check=True,
                              capture_output=True, text=True, timeout=300).stdout

    def stop(self) -> None:
        live.stop_all(list(self.processes.values()))
        if self.postgres is not None:
            self.postgres.remove()
        shutil.rmtree(self.folders, ignore_errors=True)
        self.api.pool.shutdown(wait=False)


@pytest.fixture
def cluster(hosts: dict[str, str], tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(hosts=hosts, root=tmp_path)
    try:
        running.database_start()
        running.start("redis", "a", ["redis-server", "--bind", ADDRESS["a"], "--port", "6379",
                                     "--save", "", "--appendonly", "no", "--requirepass",
                                     running.redis_password.read_text().strip()])
        running.manage("a", "migrate", "--noinput")
        running.manage("a", "shell", "-c", "from tfplatform.accounts.models import User; "
                       f"User.objects.create_superuser('ops', password={PASSWORD!r}); "
                       f"User.objects.create_user('ada', password={PASSWORD!r})")
        running.start("web", "a", [sys.executable, "-m", "uvicorn",
                                   "tfplatform.config.asgi:application", "--host", ADDRESS["a"],
                                   "--port", "8000", "--ws", "websockets-sansio"])
        running.start("scheduler", "a", [sys.executable, "manage.py", "scheduler"])
        running.start("model-loader", "a", [sys.executable, "manage.py", "model_loader"])
        running.start("model-server", "a", [sys.executable, "manage.py", "serve_models"])
        for host in ("b", "c"):
            running.start(f"node-{host}", host, [
                *live.WORKER_ARGS, "--node", f"host-{host}", "--cpu-slots", "1",
                "--gpu-slots", "0", "--address", ADDRESS[host]])
        live.wait_for(lambda: running.api.status("/healthz") == 200, timeout=120,
                      what="A's web app", log=running.log("web"))
        yield running
    finally:
        running.stop()


def _signed_in(cluster: Cluster, username: str) -> Callable[..., requests.Response]:
    signed = cluster.api.call("POST", "/api/v1/auth/token/", json={
        "username": username, "password": PASSWORD})
    assert signed.status_code == 200, signed.text[:1000]
    token = signed.json()["token"]

    def call(method: str, path: str, **options: Any) -> requests.Response:
        headers = {"Authorization": f"Token {token}", **options.pop("headers", {})}
        return cluster.api.call(method, path, headers=headers, **options)

    return call


def test_a_cluster_of_three_hosts_trains_resumes_serves_and_opens_a_workspace(
    cluster: Cluster,
) -> None:
    ada, ops = _signed_in(cluster, "ada"), _signed_in(cluster, "ops")

    def nodes() -> dict[str, dict[str, Any]]:
        return {n["hostname"]: n for n in ops("GET", "/api/v1/nodes/").json()["results"]}

    live.wait_for(lambda: {"host-b", "host-c"} <= set(nodes()), timeout=120,
                  what="both nodes to register", log=cluster.log("node-c"))

    # A gang across B and C (one CPU slot each): C dies mid-training, the gang resumes.
    created = ada("POST", "/api/v1/experiments/", json={
        "name": "across hosts", "model": "mlp", "dataset": "digits", "max_restarts": 3,
        "hyperparameters": {"epochs": 6, "batch_size": 16, "learning_rate": 0.01},
        "resources": {"workers": 2, "gpus_per_worker": 0, "parameter_servers": 0}})
    assert created.status_code == 201, created.text
    experiment = created.json()["id"]

    def epochs() -> list[int]:
        points = ada("GET", f"/api/v1/experiments/{experiment}/metrics/?name=val_accuracy")
        return [point["epoch"] for point in points.json()]

    def state() -> str:
        return str(ada("GET", f"/api/v1/experiments/{experiment}/").json()["state"])

    live.wait_for(lambda: len(epochs()) >= 2, timeout=300, what="two epochs across B and C",
                  log=cluster.log("node-b"))
    os.killpg(cluster.processes["node-c"].pid, signal.SIGKILL)
    cluster.processes["node-c"].wait()
    cluster.start("node-c-again", "c", [*live.WORKER_ARGS, "--node", "host-c", "--cpu-slots",
                                        "1", "--gpu-slots", "0", "--address", ADDRESS["c"]])
    live.wait_for(lambda: state() in ("completed", "failed"), timeout=400,
                  what="the gang to resume and finish", log=cluster.log("node-b"))
    detail = ada("GET", f"/api/v1/experiments/{experiment}/").json()
    assert detail["state"] == "completed", detail
    trials = sorted(detail["trials"], key=lambda trial: trial["restart_count"])
    assert "failed" in [t["state"] for t in trials[:-1]], trials  # C's death failed an attempt
    assert trials[-1]["state"] == "completed"
    assert epochs() == list(range(1, 7))  # resumed from its checkpoint: no epoch twice

    # What the gang trained on B and C is deployed and served from A.
    deployed = ada("POST", f"/api/v1/experiments/{experiment}/deploy/",
                   json={"model_name": "across"})
    assert deployed.status_code == 202, deployed.text

    def served() -> bool:
        versions = ada("GET", "/api/v1/models/across/").json()["versions"]
        assert versions[0]["state"] != "failed", versions
        return bool(versions[0]["state"] == "available")

    live.wait_for(served, timeout=180, what="the model server on A",
                  log=cluster.log("model-loader"))
    answer = ada("POST", "/api/v1/models/across:predict",
                 json={"instances": [[0.0] * 64]})
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["predictions"][0]["probabilities"]) == 10

    # A workspace scheduled on B (C cordoned) opens through A's web app: its Jupyter's socket
    # is in B's own homes, which A cannot see; A's lab reaches it through B's relay.
    assert ops("POST", f"/api/v1/nodes/{nodes()['host-c']['id']}/cordon/").status_code == 200
    opened = ada("POST", "/api/v1/workspaces/", json={"name": "lab", "gpus": 0})
    assert opened.status_code == 201, opened.text
    workspace = opened.json()["id"]

    def running() -> bool:
        found = ada("GET", f"/api/v1/workspaces/{workspace}/").json()
        assert found["state"] not in ("failed", "stopped"), found
        return bool(found["state"] == "running")

    live.wait_for(running, timeout=240, what="JupyterLab on B", log=cluster.log("node-b"))
    found = ada("GET", f"/api/v1/workspaces/{workspace}/").json()
    assert [device.split("/")[0] for device in found["devices"]] == ["host-b"], found
    lab = ada("GET", f"/workspaces/{workspace}/lab/api/status")
    assert lab.status_code == 200, lab.text[:500]
    assert "started" in lab.json()
