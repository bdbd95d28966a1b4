"""Starting real platform processes (worker nodes, the whole `make run` stack) from tests."""

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from training.isolation.runtime import TaskPython
from training.supervisor.forks import ForkServer
from training.supervisor.supervise import task_base_environment

ROOT = Path(__file__).resolve().parents[1]


def database_url() -> str:
    """The URL of the database this test runs against, for child processes."""
    database = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{database['NAME']}"
    user = database.get("USER") or ""
    password = f":{database['PASSWORD']}" if database.get("PASSWORD") else ""
    host = database.get("HOST") or "127.0.0.1"
    port = database.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{database['NAME']}"


# Ports of the gangs across one xdist worker's nodes (PLATFORM_TASK_PORT_SPAN).
TASK_PORT_SPAN = 1000


def task_ports() -> dict[str, str]:
    """Each xdist worker is a platform of its own on one machine, and ports of gangs across
    nodes come from allocation ids, which repeat across the workers' databases: each worker's
    gangs take ports of their own (else one fails to bind, and is retried as a new trial)."""
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw") or 0)
    return {"PLATFORM_TASK_PORT_BASE": str(20000 + index * 2 * TASK_PORT_SPAN),
            "PLATFORM_TASK_PORT_SPAN": str(TASK_PORT_SPAN)}


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1",
           "PLATFORM_TASK_FORK_SERVER_SOCKET": machine_fork_server(), **task_ports()}
    env.update(extra)
    return env


_machine_forks: list[ForkServer] = []


def machine_fork_server() -> str:
    """The socket of this test process' fork server, which the nodes it starts share as the
    nodes of one machine do (PLATFORM_TASK_FORK_SERVER_SOCKET): one TensorFlow import per
    xdist worker, not per node. Started on first use; it ends with this process."""
    if not _machine_forks or not _machine_forks[0].alive():
        for server in _machine_forks:
            server.close()
        folder = tempfile.mkdtemp(prefix="tfp-forks-")  # mode 0700, as the server requires
        _machine_forks[:] = [ForkServer.start(python=TaskPython(),
                                              env=task_base_environment(),
                                              socket_path=f"{folder}/socket")]
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        atexit.register(_machine_forks[0].close)
    return str(_machine_forks[0].socket_path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(args: list[str], *, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
    )


WORKER_ARGS = [sys.executable, "manage.py", "worker"]


def worker_start(
    *, node: str, log: Path, gpu_slots: int = 0, cpu_slots: int = 1, **env: str
) -> subprocess.Popen[bytes]:
    return start(
        [
            sys.executable,
            "manage.py",
            "worker",
            "--node",
            node,
            "--gpu-slots",
            str(gpu_slots),
            "--cpu-slots",
            str(cpu_slots),
        ],
        env=child_env(**env),
        log=log,
    )


def stop(process: subprocess.Popen[bytes], *, timeout: float = 20) -> int:
    return stop_all([process], timeout=timeout)[0]


def stop_all(processes: list[subprocess.Popen[bytes]], *, timeout: float = 20) -> list[int]:
    """Stops them together: each is asked once, all at once, then waited for (a node's warm
    shutdown takes seconds, which one after the other would add up)."""
    asked = [process for process in processes if process.poll() is None]
    for process in asked:
        os.killpg(process.pid, 15)
    for process in asked:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
    return [process.returncode for process in processes]


def wait_for(
    condition: Callable[[], object], *, timeout: float, what: str, log: Path | None = None
) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tail}")


FINISHED = ("completed", "failed", "canceled")


def experiment_state(experiment_id: int) -> str:
    from tfplatform.experiments.models import Experiment

    return str(Experiment.objects.values_list("state", flat=True).get(pk=experiment_id))


def experiment_wait_finished(
    experiment_id: int, *, timeout: float, log: Path, what: str = "the experiment to finish"
) -> str:
    try:
        wait_for(lambda: experiment_state(experiment_id) in FINISHED, timeout=timeout,
                 what=what, log=log)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{experiment_where(experiment_id)}") from None
    return experiment_state(experiment_id)


def experiment_where(experiment_id: int) -> str:
    """Where a stuck experiment stands: why it waits (the last pass's reason), its trials and
    the nodes they hold, for a timeout's message."""
    from tfplatform.cluster.models import Allocation, Node
    from tfplatform.experiments.models import Experiment

    experiment = Experiment.objects.get(pk=experiment_id)
    trials = list(experiment.trials.values_list("pk", "state"))
    held = list(Allocation.objects.values_list("node__hostname", "holder_id"))
    nodes = list(Node.objects.values_list("hostname", "state", "last_heartbeat"))
    return (f"experiment {experiment_id}: {experiment.state}, waiting because: "
            f"{experiment.pending_reason!r}; trials {trials}; allocations {held}; nodes {nodes}; "
            f"broker {broker_backlog()}")


def broker_backlog() -> dict[str, int]:
    """What waits in this worker's Redis broker: each queue's messages and those taken but not
    acknowledged. Tells a wake-up never sent (an empty queue) from one never taken."""
    if not settings.CELERY_BROKER_URL.startswith("redis://"):
        return {}
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=5)
    backlog: dict[str, int] = {}
    try:  # a test that stopped the broker still gets its own timeout message
        for key in client.scan_iter(match=f"{prefix}*", count=500):
            kind = client.type(key)
            if kind in (b"list", b"hash"):
                size = client.llen(key) if kind == b"list" else client.hlen(key)
                backlog[key.decode()] = int(size)
    except redis.RedisError:
        backlog["(broker unreachable)"] = -1
    return backlog


def metric_epochs(client: object, experiment_id: int, name: str = "val_accuracy") -> list[int]:
    """The epochs of one metric as the public API reports them."""
    url = f"/api/v1/experiments/{experiment_id}/metrics/?name={name}"
    return [m["epoch"] for m in client.get(url).json()]  # type: ignore[attr-defined]


def trial_task_pids(experiment_id: int) -> list[str]:
    """Live (non-zombie) training task processes of an experiment on this machine.

    Found by working directory: a task works in its experiment's work dir (a sandboxed one under
    the same path in its own mount namespace); nothing else of the platform does.
    """
    return _task_pids(lambda cwd: cwd.endswith(f"/experiment-{experiment_id}/"))


def work_dir_pids(work: Path) -> list[str]:
    """Live training task processes of any experiment in the work dir `work` (one node's)."""
    return _task_pids(lambda cwd: cwd.startswith(f"{work}/experiment-"))


# Where this test process' own nodes work (its pytest folder, its var folder): under xdist every
# worker numbers experiments from the same range, so a work dir is this worker's only below these.
OWN_ROOTS: list[str] = []


def _task_pids(matches: Callable[[str], bool]) -> list[str]:
    alive = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile
        own = not OWN_ROOTS or any(cwd.startswith(root) for root in OWN_ROOTS)
        if own and matches(cwd + "/") and "/runs/" not in cwd and state != "Z":
            alive.append(proc.name)
    return alive


def redis_start(*, port: int, log: Path) -> subprocess.Popen[bytes]:
    """A Redis of the test's own on `port`, keeping nothing on disk (as this machine's does):
    stopping it loses everything it held, as a broker restart without persistence does."""
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(log.parent)],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )

    def answers() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    wait_for(answers, timeout=30, what=f"redis on port {port}", log=log)
    return process


RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")


def rabbitmq_start(*, port: int, folder: Path, log: Path) -> subprocess.Popen[bytes]:
    """A RabbitMQ node of the test's own on `port`, its database in `folder`: started again on
    the same folder it comes back with its durable queues and persistent messages."""
    if not RABBITMQ_SERVER.exists():
        if os.environ.get("CI"):
            raise AssertionError("CI needs RabbitMQ (Debian's rabbitmq-server)")
        pytest.skip("RabbitMQ is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "enabled_plugins").write_text("[].\n")
    env = {
        **os.environ,
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(free_port()),
        "RABBITMQ_NODENAME": f"test{port}@localhost",
        "RABBITMQ_MNESIA_BASE": str(folder / "mnesia"),
        "RABBITMQ_LOG_BASE": str(folder / "log"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(folder / "enabled_plugins"),
        "RABBITMQ_CONFIG_FILE": str(folder / "none"),
        "RABBITMQ_PID_FILE": str(folder / "pid"),
    }
    process = subprocess.Popen([str(RABBITMQ_SERVER)], env=env, stdout=log.open("ab"),
                               stderr=subprocess.STDOUT, start_new_session=True)

    def answers() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"AMQP\x00\x00\x09\x01")
                return bool(sock.recv(8))  # connection.start: the broker speaks AMQP
        except OSError:
            return False

    wait_for(answers, timeout=90, what=f"RabbitMQ on port {port}", log=log)
    return process


PG_BIN = max(Path("/usr/lib/postgresql").glob("*/bin"), default=Path("/usr/bin"))


class Postgres:
    """A PostgreSQL cluster of the test's own (initdb on a free port), stopped and started by
    the test; never the machine's shared server. It runs as the `postgres` user, which cannot
    enter pytest's root-only folders, so its data lives in a folder of its own under /tmp.
    `address`, `netns` and `trusted`: where it listens (inside that network namespace, a test
    "host") and the network whose clients it lets in without a password."""

    def __init__(self, *, port: int, address: str = "127.0.0.1", netns: str | None = None,
                 trusted: str | None = None) -> None:
        self.port, self.address, self.netns = port, address, netns
        self.folder = Path(tempfile.mkdtemp(prefix="tfplatform-pg-"))
        shutil.chown(self.folder, user="postgres", group="postgres")
        self.data, self.log = self.folder / "data", self.folder / "postgres.log"
        self._as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust",
                           "-U", "postgres", "--no-sync"])
        if trusted:
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {trusted} trust\n")
        self.start()
        self._as_postgres([str(PG_BIN / "createdb"), "-h", str(self.folder), "-p", str(port),
                           "-U", "postgres", "platform"])

    @property
    def url(self) -> str:
        return f"postgres://postgres@{self.address}:{self.port}/platform"

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.folder} -c listen_addresses={self.address} "
                   "-c fsync=off -c max_connections=200")
        start = [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                 str(self.log), "-w", "start"]
        # The server inherits the network namespace it is started in.
        self._as_postgres(start if self.netns is None else
                          ["nsenter", f"--net=/run/netns/{self.netns}", "--", *start])

    def stop(self) -> None:
        self._as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                           "stop"])

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _as_postgres(self, args: list[str]) -> None:
        # nsenter, when there is one, runs as root and drops to postgres inside the namespace.
        if args[0] == "nsenter":
            args = [*args[:3], "runuser", "-u", "postgres", "--", *args[3:]]
        else:
            args = ["runuser", "-u", "postgres", "--", *args]
        subprocess.run(args, check=True, capture_output=True, timeout=120, cwd=self.folder)


def platform_env(*, database_url: str, var_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a platform of the test's own: its database, its var folder and the
    broker that needs no server there (the suite's Redis is not its business)."""
    env = {**os.environ, "DATABASE_URL": database_url, "PLATFORM_VAR_DIR": str(var_dir),
           "CELERY_BROKER_URL": "filesystem://", "PYTHONUNBUFFERED": "1"}
    env.pop("CACHE_URL", None)
    return env | extra


def manage(*args: str, env: dict[str, str]) -> str:
    """`manage.py ARGS` in that environment; what it printed."""
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True, timeout=300).stdout


def user_create(*, username: str, password: str, env: dict[str, str]) -> None:
    """An account in the platform that `env` points at (a database of the test's own)."""
    manage("shell", "-c", "from tfplatform.accounts.models import User; "
           f"User.objects.create_user(username={username!r}, password={password!r})", env=env)


def http_status(url: str) -> int:
    """The status a GET answers with; 0 while nothing listens."""
    import requests

    try:
        return int(requests.get(url, timeout=10).status_code)
    except requests.RequestException:
        return 0
