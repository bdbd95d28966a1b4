"""A hostile model module, submitted through the API by an ordinary user, reaches nothing.

At import the module tries every way out the isolation issues list (secrets in its environment,
the database, the secret key, other tenants' files, the platform's code, platform processes and
their command lines, the model server's reload RPC, every service on the host's loopback over
TCP, MPTCP and UDP (PostgreSQL, Redis, RabbitMQ, the web app's /metrics, the model server),
another tenant's running gang's TF servers, the host's pathname and abstract Unix sockets, a
listener in the node's name, a process that outlives the trial) and prints what worked. Training
must still complete, and nothing may have worked. Under the sandbox, the sandbox with Landlock
turned off (as on Ubuntu 22.04's kernel: namespaces and seccomp alone), and podman.
"""

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from rest_framework.test import APIClient

from tests import live
from tests.factories import EnvironmentFactory, UserFactory
from tfplatform.cluster.models import Node
from tfplatform.experiments.models import Experiment, Metric
from training.isolation.container_settings import RUNTIME_IMAGE
from training.isolation.runtime import TaskPython
from training.isolation.sandbox import runtime_paths, trial_paths
from training.spec import TrialSpec

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
CANARY = "canary-7f3a9c"
POSTGRES_SOCKET = "/var/run/postgresql/.s.PGSQL.5432"

PROBE = r'''
import json, os, socket, time

P = json.loads(PARAMS)
report = {}


def attempt(name, action):
    try:
        result = action()
    except Exception as error:
        report[name] = f"blocked: {type(error).__name__}: {str(error)[:120]}"
    else:
        report[name] = f"WORKED: {str(result)[:200]}"


def read(path):
    with open(path, "rb") as handle:
        return handle.read(64)


def append(path):
    with open(path, "a") as handle:
        handle.write("# written by a trial\n")
    return path


def connect(port):
    with socket.create_connection(("127.0.0.1", port), timeout=3):
        return port


def connect_mptcp(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262) as sock:
        sock.settimeout(3)
        sock.connect(("127.0.0.1", port))
        return port


def connect_unix(address):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(3)
        sock.connect(address)
        return address


def udp_send(port):
    # Sending succeeds in any network; whether it arrived is for the test's receiver to say.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(P["canary"].encode(), ("127.0.0.1", port))


def listen_in_the_nodes_name():
    """A listener the test tries to reach from the node while the trial runs."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", P["listen_port"]))
    server.listen(8)

    def serve():
        while True:
            peer, _ = server.accept()
            peer.sendall(P["canary"].encode())
            peer.close()

    threading.Thread(target=serve, daemon=True).start()
    time.sleep(4)  # the test polls the port meanwhile
    return server


def proc_cmdline_scan():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"manage.py" in handle.read():
                    found.append(pid)
        except OSError:
            pass
    if not found:
        raise LookupError("no platform process is visible")
    return found


def proc_environ_scan():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if P["canary"].encode() in handle.read():
                    found.append(pid)
        except OSError:
            pass
    if not found:
        raise LookupError(f"no process environment holds the canary ({os.listdir('/proc')})")
    return found


def model_server_reload():
    import grpc
    from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc

    channel = grpc.insecure_channel(P["model_server_grpc"])
    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    return stub.HandleReloadConfigRequest(model_management_pb2.ReloadConfigRequest(), timeout=5)


# A grandchild in a new session, meant to outlive the trial and keep a heartbeat. Forked before
# the gRPC probe: a fork after gRPC has started its threads can hang in gRPC's fork handlers.
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:
        heartbeat = os.path.join(os.getcwd(), "heartbeat")
        deadline = time.time() + 180
        while time.time() < deadline:
            with open(heartbeat, "w") as handle:
                handle.write(str(time.time()))
            time.sleep(0.2)
    os._exit(0)
os.waitpid(child, 0)

leaked = sorted(name for name, value in os.environ.items()
                if P["canary"] in value or any(word in name for word in P["secret_words"]))
report["environment"] = f"WORKED: {leaked}" if leaked else f"blocked: {sorted(os.environ)}"
for name, path in P["read"].items():
    attempt(f"read {name}", lambda path=path: read(path))
for name, path in P["list"].items():
    attempt(f"list {name}", lambda path=path: ",".join(sorted(os.listdir(path))))
for name, path in P["write"].items():
    attempt(f"write {name}", lambda path=path: append(path))
for name, port in P["ports"].items():
    attempt(f"connect {name}", lambda port=port: connect(port))
    attempt(f"connect {name} over MPTCP", lambda port=port: connect_mptcp(port))
    try:
        udp_send(port)
    except OSError:
        pass
for name, address in P["unix"].items():
    attempt(f"connect unix socket {name}", lambda address=address: connect_unix(address))
try:
    LISTENER = listen_in_the_nodes_name()
except OSError:
    pass  # Landlock's TCP rules refuse the bind itself, where the kernel has them
attempt("read platform processes' command lines", proc_cmdline_scan)
attempt("signal platform processes", lambda: [os.kill(pid, 0) for pid in P["pids"]])
attempt("read other processes' environment", proc_environ_scan)
attempt("model server reload RPC", model_server_reload)
attempt("symlink in own work dir", lambda: os.symlink(P["read"]["secret key"], "planted-link"))

# What a trial must still be able to do: its own work dir and its own module.
controls = {}
with open("own-file.txt", "w") as handle:
    controls["write own work dir"] = handle.write("mine")
controls["read own module"] = len(read(__file__))

for name, outcome in report.items():
    print("ESCAPE " + json.dumps([name, outcome]), flush=True)
print("CONTROLS " + json.dumps(controls), flush=True)

import tf_keras as keras


def build_model(hparams):
    return keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        keras.layers.Rescaling(1.0 / 16),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(hparams["num_classes"], activation="softmax"),
    ])
'''


VICTIM = """
import tf_keras as keras


def build_model(hparams):
    return keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        keras.layers.Dense(8, activation="relu"),
        keras.layers.Dense(hparams["num_classes"], activation="softmax"),
    ])
"""


@pytest.fixture
def service_port() -> Iterator[dict[str, Any]]:
    """A platform service on the host's loopback, listening on TCP and UDP at one port number;
    what the UDP side received is kept (it must stay empty)."""
    with socket.socket() as server, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = int(server.getsockname()[1])
        udp.bind(("127.0.0.1", port))
        udp.setblocking(False)
        yield {"port": port, "udp": udp}


def _datagrams(udp: socket.socket) -> list[bytes]:
    received = []
    while True:
        try:
            received.append(udp.recv(4096))
        except BlockingIOError:
            return received


@pytest.fixture
def host_unix_sockets(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The host's Unix sockets: PostgreSQL's, one in the platform's var dir, an abstract one."""
    path = Path(settings.VAR_DIR) / f"isolation-{tmp_path.name[-12:]}.sock"
    abstract = f"\0tfplatform-isolation-{os.getpid()}-{tmp_path.name[-12:]}"  # host-wide names
    with socket.socket(socket.AF_UNIX) as named, socket.socket(socket.AF_UNIX) as hidden:
        named.bind(str(path))
        named.listen(8)
        hidden.bind(abstract)
        hidden.listen(8)
        sockets = {"in var/": str(path), "abstract": abstract}
        if Path(POSTGRES_SOCKET).exists():
            sockets["postgresql"] = POSTGRES_SOCKET
        yield sockets
    path.unlink()


@pytest.fixture
def web_app(tmp_path: Path) -> Iterator[int]:
    """The web app on the host's loopback, served as in production (its /metrics included)."""
    port = live.free_port()
    log = tmp_path / "web.log"
    process = live.start([sys.executable, "-m", "uvicorn", "tfplatform.config.asgi:application",
                          "--host", "127.0.0.1", "--port", str(port)],
                         env=live.child_env(PYTHONPATH="platform:."), log=log)
    live.wait_for(lambda: live.http_status(f"http://127.0.0.1:{port}/healthz") == 200,
                  timeout=60, what="the web app", log=log)
    yield port
    live.stop(process)


class _ListenerWatch:
    """Connects to a port of the node's loopback until stopped, keeping what answered."""

    def __init__(self, port: int) -> None:
        self.port, self.answers = port, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    self.answers.append(sock.recv(64))
            except OSError:
                pass

    def stop(self) -> list[bytes]:
        self._stop.set()
        self._thread.join()
        return self.answers


@pytest.fixture
def other_tenant(tmp_path: Path) -> dict[str, Path]:
    """Another user's upload and checkpoint, where the platform keeps them."""
    upload = Path(settings.MEDIA_ROOT) / "models" / "other-tenant" / f"{tmp_path.name}.py"
    upload.parent.mkdir(parents=True, exist_ok=True)
    upload.write_text(f"SECRET = '{CANARY}'\n")
    checkpoint = tmp_path / "work" / "experiment-999999" / "checkpoints" / "ckpt-1.index"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(CANARY.encode())
    yield {"upload": upload, "checkpoint": checkpoint}
    upload.unlink()


def _worker_pids(node: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"worker" in argv and node.encode() in argv:
            pids.append(int(proc.name))
    return pids


def _probe_params(*, tmp_path: Path, node: str, service_port: int, model_server: dict[str, Any],
                  other_tenant: dict[str, Path], unix: dict[str, str], web_port: int,
                  gang_ports: list[int]) -> dict[str, Any]:
    database = connection.settings_dict
    read = {
        "secret key": str(Path(settings.VAR_DIR) / "secret_key"),
        "other tenant's upload": str(other_tenant["upload"]),
        "other tenant's checkpoint": str(other_tenant["checkpoint"]),
        "platform settings module": str(ROOT / "platform/tfplatform/config/settings.py"),
        "/etc/shadow": "/etc/shadow",
    }
    if connection.vendor == "sqlite":
        read["database file"] = str(database["NAME"])
    return {
        "canary": CANARY,
        "secret_words": ["SECRET", "PASSWORD", "DATABASE", "BROKER", "CELERY", "DJANGO",
                         "TF_SERVING", "CACHE_URL"],
        "read": read,
        "list": {
            "work dirs": str(tmp_path / "work"),
            "uploads": str(settings.MEDIA_ROOT),
            "supervisor run dirs": str(tmp_path / "runs"),
            "broker folder": str(Path(settings.VAR_DIR) / "broker"),
            "model base path": str(model_server["base"]),
            "repository": str(ROOT),
        },
        "write": {
            "training package": str(ROOT / "training" / "__init__.py"),
            "other tenant's checkpoint": str(other_tenant["checkpoint"]),
        },
        "ports": {
            "platform service": service_port,
            "postgresql": 5432,
            "redis": 6379,
            "rabbitmq": 5672,
            "model server gRPC": int(model_server["grpc"].rsplit(":", 1)[1]),
            "model server REST": int(model_server["rest"].rsplit(":", 1)[1]),
            "web app (/metrics)": web_port,
            **{f"another tenant's gang, task {n}": port for n, port in enumerate(gang_ports)},
        },
        "unix": unix,
        "listen_port": live.free_port(),
        "pids": [os.getpid(), *_worker_pids(node)],
        "model_server_grpc": model_server["grpc"],
    }


def _own_mount_points(*, name: str, outcome: str, params: dict[str, Any], run_dir: Path,
                      experiment: int) -> bool:
    """Without Landlock a folder above the trial's own mounts can be listed, and shows the
    names the sandbox made to mount them on, empty but for the trial's own: nothing else."""
    if not name.startswith("list "):
        return False
    folder = Path(params["list"][name.removeprefix("list ")]).resolve()
    [attempt] = (run_dir / f"experiment-{experiment}" / "attempts").iterdir()
    spec = TrialSpec.from_json((attempt / "spec.json").read_text())
    write, read = trial_paths(spec=spec)
    mounted = [Path(path).resolve() for path in (*write, *read,
                                                 *runtime_paths(python=TaskPython()))]
    skeleton = {path.relative_to(folder).parts[0] for path in mounted
                if path.is_relative_to(folder) and path != folder}
    listed = set(outcome.removeprefix("WORKED: ").split(",")) - {""}
    return listed <= skeleton


def _heartbeat_stopped(path: Path) -> bool:
    before = path.stat().st_mtime
    time.sleep(1.5)
    return path.stat().st_mtime == before


# The podman variant runs with the engine's other tests (tests/conftest.py); the sandbox
# variants with their module. Their abstract socket's name is the test process's own.
@pytest.fixture(params=["sandbox", "sandbox-without-fork-server", "sandbox-without-landlock",
                        pytest.param("podman", marks=pytest.mark.xdist_group("podman"))])
def runtime(request: pytest.FixtureRequest) -> dict[str, str]:
    """The worker node's settings for each isolating runtime, and the environment to pick.
    A root node's sandboxed tasks are forked from its fork server; without one, a task may
    become a warm host, made before its trial was known."""
    if request.param == "sandbox":
        return {"PLATFORM_TRIAL_RUNTIME": "sandbox"}
    if request.param == "sandbox-without-fork-server":
        return {"PLATFORM_TRIAL_RUNTIME": "sandbox", "PLATFORM_TASK_FORK_SERVER": "0"}
    if request.param == "sandbox-without-landlock":
        return {"PLATFORM_TRIAL_RUNTIME": "sandbox", "PLATFORM_LANDLOCK_ABI": "0"}
    engine = request.getfixturevalue("podman_engine")
    EnvironmentFactory(name="node-runtime-image", image=RUNTIME_IMAGE)
    return {"PLATFORM_TRIAL_RUNTIME": "podman", "PLATFORM_CONTAINER_ENGINE_URL": engine,
            "PLATFORM_CONTAINER_OCI_RUNTIME": "runc", "environment": "node-runtime-image"}


def _submit(client: APIClient, *, name: str, source: str, environment: str | None,
            **fields: Any) -> int:
    response = client.post("/api/v1/experiments/", {
        "name": name, "model": "upload", "dataset": "digits",
        "model_file": SimpleUploadedFile(f"{name}.py", source.encode()),
        **({"environment": environment} if environment else {}), **fields,
    }, format="multipart")
    assert response.status_code == 201, response.json()
    return int(response.json()["id"])


def _gang_ports(experiment_id: int, *, run_dir: Path, log: Path) -> list[int]:
    """The TF server ports of a gang that has trained an epoch (its servers are up)."""
    live.wait_for(lambda: Metric.objects.filter(trial__experiment_id=experiment_id).exists(),
                  timeout=240, what="the other tenant's gang to train", log=log)
    [attempt] = (run_dir / f"experiment-{experiment_id}" / "attempts").iterdir()
    return [task["port"] for task in json.loads((attempt / "cluster.json").read_text())]


def test_a_hostile_module_trains_and_reaches_nothing(
    tmp_path: Path, service_port: dict[str, Any], model_server: dict[str, Any],
    other_tenant: dict[str, Path], runtime: dict[str, str], host_unix_sockets: dict[str, str],
    web_app: int,
) -> None:
    node = f"isolation-{tmp_path.name[-12:]}"
    log = tmp_path / "worker.log"
    environment = runtime.pop("environment", None)
    # Three slots: the other tenant's gang of two, and the hostile trial.
    process = live.worker_start(
        node=node, log=log, cpu_slots=3, PLATFORM_WORK_DIR=str(tmp_path / "work"),
        PLATFORM_RUN_DIR=str(tmp_path / "runs"),
        PLATFORM_ADMIN_PASSWORD=CANARY, PLATFORM_CANARY_SECRET=CANARY,
        TF_SERVING_GRPC=model_server["grpc"], TF_SERVING_REST=model_server["rest"],
        MODEL_BASE_PATH=str(model_server["base"]), **runtime,
        # As deployed: where there is no fork server, a task may become a warm host.
        PLATFORM_WARM_TRIAL_PROCESSES="1",
    )
    watch = None
    try:
        live.wait_for(lambda: Node.objects.filter(hostname=node).exists(), timeout=60,
                      what="node registration", log=log)
        victim_client = APIClient()
        victim_client.force_authenticate(UserFactory())
        victim = _submit(victim_client, name="victim", source=VICTIM, environment=environment,
                         resources=json.dumps({"workers": 2}),
                         hyperparameters=json.dumps({"epochs": 1000,
                                                                "batch_size": 256}))
        gang_ports = _gang_ports(victim, run_dir=tmp_path / "runs", log=log)
        training_init = (ROOT / "training" / "__init__.py").read_bytes()
        params = _probe_params(tmp_path=tmp_path, node=node, service_port=service_port["port"],
                               model_server=model_server, other_tenant=other_tenant,
                               unix=host_unix_sockets, web_port=web_app, gang_ports=gang_ports)
        assert params["pids"][1:], "the worker node's process was not found"
        source = PROBE.replace("PARAMS", repr(json.dumps(params)))
        client = APIClient()
        client.force_authenticate(UserFactory())
        watch = _ListenerWatch(params["listen_port"])
        experiment_id = _submit(client, name="hostile", source=source, environment=environment,
                                hyperparameters=json.dumps({"epochs": 2, "batch_size": 32}))
        state = live.experiment_wait_finished(experiment_id, timeout=240, log=log)
        answers = watch.stop()
        experiment = Experiment.objects.get(pk=experiment_id)
        assert state == "completed", (experiment.error, log.read_text()[-3000:])
        [trial] = client.get(f"/api/v1/experiments/{experiment_id}/").json()["trials"]
        assert trial["runtime"] == runtime["PLATFORM_TRIAL_RUNTIME"]
        assert trial["tensorflow_version"].startswith("2.")

        # What the module printed is in the experiment's log stream, as the user sees it.
        logs = client.get(f"/api/v1/experiments/{experiment_id}/logs/").json()["logs"]
        report = dict(json.loads(line.split("ESCAPE ", 1)[1])
                      for line in logs.splitlines() if " ESCAPE [" in line)
        [controls] = [json.loads(line.split("CONTROLS ", 1)[1])
                      for line in logs.splitlines() if " CONTROLS {" in line]
        assert controls == {"write own work dir": 4, "read own module": 64}
        expected = {"environment", "signal platform processes", "model server reload RPC",
                    "read other processes' environment", "symlink in own work dir",
                    "read platform processes' command lines",
                    *(f"read {n}" for n in params["read"]), *(f"list {n}" for n in params["list"]),
                    *(f"write {n}" for n in params["write"]),
                    *(f"connect {n}" for n in params["ports"]),
                    *(f"connect {n} over MPTCP" for n in params["ports"]),
                    *(f"connect unix socket {n}" for n in params["unix"])}
        assert set(report) == expected
        worked = {name: outcome for name, outcome in report.items() if outcome.startswith("WORKED")
                  and not _own_mount_points(name=name, outcome=outcome, params=params,
                                            run_dir=tmp_path / "runs", experiment=experiment_id)}
        assert worked == {}, report
        assert _datagrams(service_port["udp"]) == []
        assert answers == [], "the trial listened in the node's name"

        assert (ROOT / "training" / "__init__.py").read_bytes() == training_init
        assert other_tenant["checkpoint"].read_bytes() == CANARY.encode()
        # The double-forked grandchild ended with the trial's sandbox or container.
        work_dir = tmp_path / "work" / f"experiment-{experiment_id}"
        heartbeat = work_dir / "heartbeat"
        assert heartbeat.exists(), "the grandchild never ran"
        assert _heartbeat_stopped(heartbeat), "a process of the trial outlived it"
        assert live.trial_task_pids(experiment_id) == []
        # The other tenant's gang was running all along, untouched.
        assert live.experiment_state(victim) == "running"
        victim_client.post(f"/api/v1/experiments/{victim}/cancel/")
        assert live.experiment_wait_finished(victim, timeout=120, log=log) == "canceled"
    finally:
        if watch is not None:
            watch.stop()
        live.stop(process)
