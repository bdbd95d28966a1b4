"""The whole platform in subprocesses for one benchmark run, as `make run` starts it.

A fresh var directory (SQLite database, models, work dirs), gunicorn on a free port, one worker
node with declared slots, the scheduler, the embedded model server and its model loader; an
admin account whose API token the benchmarks use. Settings are production-like (DEBUG off)
except HTTPS, which a loopback benchmark cannot use. Everything is stopped, process group by
process group, on exit.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import redis
import requests

from bench.net import free_port, wait_until

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
ADMIN = "admin"
STARTUP_SECONDS = 180.0


def web_args(*, port: int) -> list[str]:
    # The Procfile's web process.
    return [
        GUNICORN, "--pythonpath", "platform,.", "--bind", f"127.0.0.1:{port}", "--workers", "2",
        "--threads", "4", "--graceful-timeout", "10", "tfplatform.config.wsgi",
    ]


@dataclass
class Stack:
    var_dir: Path
    broker_url: str = ""  # empty: the embedded filesystem broker
    gpu_slots: int = 2
    cpu_slots: int = 3
    node: str = field(default_factory=lambda: f"bench-{secrets.token_hex(3)}")
    password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    rest_port: int = field(default_factory=free_port)
    batching_parameters: str = ""  # the model server's parameters file; empty: its defaults
    # The production shape (PostgreSQL, a Redis cache and throttles); empty: `make run`'s
    # embedded SQLite and local-memory cache.
    database_url: str = ""
    cache_url: str = ""
    # The model server's (intra-op, inter-op) session threads; (0, 0): TensorFlow's defaults.
    session_parallelism: tuple[int, int] = (0, 0)
    token: str = ""
    # The model servers' access token (serving/access.py), shared by every process of the stack.
    serving_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _worker_log_from: int = 0  # where the running node's part of worker.log begins

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def serving_headers(self) -> dict[str, str]:
        """What a client of the model servers sends: their access token."""
        from serving.access import access_header

        return access_header(token=self.serving_token)

    @property
    def model_base_path(self) -> Path:
        return self.var_dir / "models"

    @property
    def logs(self) -> Path:
        return self.var_dir / "logs"

    def env(self, **extra: str) -> dict[str, str]:
        # Not taken from the caller: the stack runs as `make run` does (the suite turns the
        # model server's front off for its own processes, pyproject.toml).
        inherited = ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "DJANGO_SETTINGS_MODULE",
                     "TF_SERVING_FRONT_REFRESH_SECONDS")
        env = {key: value for key, value in os.environ.items() if key not in inherited}
        env |= {
            "PLATFORM_VAR_DIR": str(self.var_dir),
            "DJANGO_DEBUG": "false",
            "DJANGO_SECURE": "false",  # plain HTTP on loopback
            "DJANGO_STATIC_MANIFEST": "false",
            "PLATFORM_ADMIN_PASSWORD": self.password,
            "PLATFORM_NODE_NAME": self.node,
            "TF_SERVING_GRPC": self.grpc_target,
            "TF_SERVING_REST": self.rest_url,
            "TF_SERVING_ACCESS_TOKEN": self.serving_token,
            "PLATFORM_THROTTLE_INFERENCE": "1000000/min",  # the benchmark is not abuse
            # Item 10's Spark cluster runs on this machine (local[2]).
            "PLATFORM_SPARK_LOCAL_MASTERS": "true",
            "TF_SERVING_INTRA_OP_PARALLELISM": str(self.session_parallelism[0]),
            "TF_SERVING_INTER_OP_PARALLELISM": str(self.session_parallelism[1]),
            "PYTHONUNBUFFERED": "1",
            "TF_CPP_MIN_LOG_LEVEL": "2",
        }
        if self.broker_url:
            env["CELERY_BROKER_URL"] = self.broker_url
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        if self.cache_url:
            env["CACHE_URL"] = self.cache_url
        return env | extra

    # ---- processes --------------------------------------------------------------------------

    def spawn(self, name: str, args: list[str], **extra_env: str) -> subprocess.Popen[bytes]:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                args, cwd=ROOT, env=self.env(**extra_env), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes[name] = process
        return process

    def manage(self, *args: str, **extra_env: str) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"manage-{args[0]}.log").open("ab") as log:
            subprocess.run(
                [PYTHON, "manage.py", *args], cwd=ROOT, env=self.env(**extra_env), stdout=log,
                stderr=subprocess.STDOUT, check=True, timeout=STARTUP_SECONDS,
            )

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def wait(self, condition: Callable[[], bool], *, what: str, process: str,
             timeout: float = STARTUP_SECONDS) -> None:
        def ready() -> bool:
            found = self.processes.get(process)
            if found is not None and found.poll() is not None:
                raise RuntimeError(f"{process} exited with {found.returncode}:\n"
                                   f"{self.log_tail(process)}")
            return condition()

        if not wait_until(ready, timeout=timeout):
            raise TimeoutError(f"{what} not ready after {timeout:.0f}s:\n{self.log_tail(process)}")

    def start(self) -> Stack:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        self.manage("migrate", "--noinput")
        self.manage("platform_bootstrap")
        batching = {}
        if self.batching_parameters:
            path = self.var_dir / "batching.config"
            path.write_text(self.batching_parameters)
            batching["TF_SERVING_BATCHING_PARAMETERS_FILE"] = str(path)
        self.spawn("serving", [PYTHON, "manage.py", "serve_models"], **batching)
        self.spawn("web", web_args(port=self.port))
        self.spawn("loader", [PYTHON, "manage.py", "model_loader"])
        self.spawn("scheduler", [PYTHON, "manage.py", "scheduler"])
        self._worker_spawn()
        self.wait(lambda: _answers(f"{self.base_url}/healthz"), what="web", process="web")
        self.wait(lambda: _answers(f"{self.rest_url}/v1/models/none", status=404,
                                   headers=self.serving_headers),
                  what="model server", process="serving")
        answer = requests.post(
            f"{self.base_url}/api/v1/auth/token/",
            json={"username": ADMIN, "password": self.password}, timeout=30,
        )
        answer.raise_for_status()
        self.token = answer.json()["token"]
        self.wait(self._node_ready, what=f"worker node {self.node}", process="worker")
        return self

    def _worker_spawn(self, **extra_env: str) -> None:
        log = self.logs / "worker.log"
        self._worker_log_from = log.stat().st_size if log.exists() else 0
        self.spawn("worker", [
            PYTHON, "manage.py", "worker", "--node", self.node,
            "--gpu-slots", str(self.gpu_slots), "--cpu-slots", str(self.cpu_slots),
        ], **extra_env)

    def worker_restart(self, **extra_env: str) -> None:
        """The node again, with these settings over the stack's (a node that starts every
        task cold, for one), once its last trial has ended."""
        self.stop_process("worker")
        self._worker_spawn(**extra_env)
        self.wait(self._node_ready, what=f"worker node {self.node}", process="worker")

    def _node_ready(self) -> bool:
        answer = requests.get(f"{self.base_url}/api/v1/nodes/", headers=self.headers, timeout=10)
        nodes = answer.json().get("results", []) if answer.ok else []
        # The worker registers before its Celery consumer is up: wait for its log to say so
        # (this start's part of the log: a restarted node appends to it).
        log = self.logs / "worker.log"
        with log.open("rb") as text:
            text.seek(self._worker_log_from)
            ready = b" ready." in text.read()
        return any(n.get("hostname") == self.node for n in nodes) and ready

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Token {self.token}"}

    def stop_process(self, name: str, *, timeout: float = 30) -> None:
        process = self.processes.pop(name, None)
        if process is None:
            return
        if process.poll() is None:
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
        # Children the process left behind (trial tasks) share its group.
        _signal_group(process, signal.SIGKILL)

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self.stop_process(name)
        if self.broker_url.startswith("redis://"):
            # The node's queue and exchange bindings; its name is unique to this run.
            client = redis.Redis.from_url(self.broker_url)
            keys = list(client.scan_iter(match=f"*node.{self.node}*"))
            if keys:
                client.delete(*keys)

    def __enter__(self) -> Stack:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group has exited already
        os.killpg(process.pid, sig)


def _answers(url: str, *, status: int = 200, headers: dict[str, str] | None = None) -> bool:
    try:
        return requests.get(url, timeout=5, headers=headers).status_code == status
    except requests.RequestException:
        return False


def settle(seconds: float) -> None:
    """Lets start-up work (imports, first heartbeats) finish before anything is timed."""
    time.sleep(seconds)
