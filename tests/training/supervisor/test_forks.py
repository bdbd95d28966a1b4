"""Tasks forked from the node's fork server: inside, exactly what a cold host's task is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from training.isolation.runtime import Runtime, TaskPython, node_privileged
from training.isolation.runtime_factory import runtime_for
from training.spec import TrialEvent, TrialOutcome, TrialSpec
from training.supervisor import forks
from training.supervisor.supervise import task_base_environment, trial_supervise

pytestmark = pytest.mark.slow

# At import, inside the task: what it is, holds and sees, written to its own work dir.
PROBE = '''
import json, os, random, socket
from pathlib import Path

import numpy as np
import tf_keras as keras


def _status():
    wanted = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
              "NoNewPrivs", "Seccomp", "Seccomp_filters")
    fields = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
    return {name: " ".join(fields[name].split()) for name in wanted}


def _fds():
    kinds = []
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        kinds.append(target.split(":")[0] if ":" in target else "file")
    return kinds


def _connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError as error:
        return type(error).__name__
    return "WORKED"


def _readable(path):
    try:
        Path(path).read_bytes()
    except OSError as error:
        return type(error).__name__
    return "WORKED"


report = {
    "status": _status(),
    # Its own pid namespace: pid 1 (the host, or the holder) and itself.
    "pids": [p == os.getpid() for p in sorted(int(p) for p in os.listdir("/proc") if p.isdigit())],
    "ppid_is_pid1": os.getppid() in (0, 1),
    "terminal": open("/proc/self/stat").read().rsplit(")", 1)[1].split()[4],
    "hostname": socket.gethostname(),
    "mounts": sorted({line.split()[4] for line in open("/proc/self/mountinfo")}),
    "cwd": os.getcwd(),
    "environ": sorted(os.environ),
    "cuda": {name: os.environ.get(name) for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")},
    "fds": _fds(),
    "umask": os.umask(0o022),
    "postgres": _connect(5432),
    "platform code": _readable(PLATFORM_FILE),
    "machine id": _readable("/etc/machine-id"),
}
# The trial's seed decides these (keras.utils.set_random_seed), never what the server drew.
report["draws"] = [float(np.random.random()), random.random()]
(Path.cwd() / "probe.json").write_text(json.dumps(report))


def build_model(hparams):
    return keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        keras.layers.Rescaling(1.0 / 16),
        keras.layers.Dense(hparams["num_classes"], activation="softmax"),
    ])
'''
ROOT = Path(__file__).resolve().parents[3]

needs_root = pytest.mark.skipif(not node_privileged(),
                                reason="only a node run as root forks its tasks")


def _run(*, spec: TrialSpec, fork_server: bool) -> tuple[TrialOutcome, list[TrialEvent]]:
    return _run_on(spec=spec, runtime=runtime_for(name="sandbox", fork_server=fork_server))


def _launched(events: list[TrialEvent]) -> list[dict[str, Any]]:
    [launched] = [e.payload for e in events if e.payload.get("phase") == "launched"]
    return list(launched["tasks"])


def _memory_holds(*, pid: int, needle: bytes) -> bool:
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as memory:
        for line in maps:
            span, permissions = line.split()[:2]
            if not permissions.startswith("r"):
                continue
            start, end = (int(part, 16) for part in span.split("-"))
            try:
                memory.seek(start)
                if needle in memory.read(end - start):
                    return True
            except (OSError, OverflowError, ValueError):
                continue  # [vsyscall] and guard pages cannot be read
    return False


@pytest.fixture
def probe(tmp_path: Path) -> str:
    path = tmp_path / "probe_module.py"
    path.write_text(PROBE.replace("PLATFORM_FILE",
                                  repr(str(ROOT / "platform" / "tfplatform" / "__init__.py"))))
    return str(path)


@needs_root
def test_a_forked_task_is_what_a_cold_one_is_only_cheaper(
    tmp_path: Path, probe: str, make_spec: Callable[..., TrialSpec],
) -> None:
    reports = {}
    canary = uuid.uuid4().hex  # in every order of the forked trials: their work dirs' names
    for name, fork_server in (("cold", False), ("forked", True), ("forked again", True)):
        # "forked again": from the same server, which the first fork left as it was.
        work = tmp_path / (name.replace(" ", "-") + ("-" + canary if fork_server else ""))
        spec = make_spec(work_dir=work, model=probe, hyperparameters={"epochs": 1})
        outcome, events = _run(spec=spec, fork_server=fork_server)
        assert outcome.status == "completed", outcome.exit_reason
        [task] = _launched(events)
        assert task["forked"] is fork_server
        reports[name] = json.loads((work / "probe.json").read_text())
    cold, forked = reports["cold"], reports["forked"]
    # Everything but where it runs: its own work dir, named after the trial.
    assert forked["cwd"] == str(tmp_path / f"forked-{canary}")
    assert cold["cwd"] == str(tmp_path / "cold")
    assert forked["mounts"] == [m.replace("/cold", f"/forked-{canary}") for m in cold["mounts"]]
    # bubblewrap leaves its task a bounding set (with none of it effective); a forked task drops
    # that too.
    assert cold["status"]["CapEff"] == "0000000000000000"
    assert forked["status"]["CapEff"] == forked["status"]["CapBnd"] == "0000000000000000"
    for report in (cold, forked):
        report.pop("cwd"), report.pop("mounts"), report["status"].pop("CapBnd")
    assert forked == cold
    # No GPU for a CPU task; where there are, NVML's indices (PCI bus order) name them.
    assert cold["cuda"] == {"CUDA_VISIBLE_DEVICES": "", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert forked["status"]["NoNewPrivs"] == "1" and forked["status"]["Seccomp"] == "2"
    assert forked["status"]["Uid"].split()[0] == "1000"
    assert forked["postgres"] != "WORKED" and forked["platform code"] != "WORKED"
    assert reports["forked again"]["draws"] == forked["draws"]
    # No order passed through the server's memory, which every later task copies.
    assert forks._server is not None
    assert not _memory_holds(pid=forks._server.process.pid, needle=canary.encode())


@needs_root
def test_a_fork_server_that_died_is_replaced_and_tasks_still_train(
    tmp_path: Path, make_spec: Callable[..., TrialSpec], digits_module: str,
) -> None:
    outcome, events = _run(spec=make_spec(work_dir=tmp_path / "first", model=digits_module,
                                          hyperparameters={"epochs": 1}), fork_server=True)
    assert outcome.status == "completed", outcome.exit_reason
    server = forks._server
    assert server is not None and server.alive()
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait()
    outcome, events = _run(spec=make_spec(work_dir=tmp_path / "second", model=digits_module,
                                          hyperparameters={"epochs": 1}), fork_server=True)
    assert outcome.status == "completed", outcome.exit_reason
    assert [task["forked"] for task in _launched(events)] == [True]
    assert forks._server is not None and forks._server.process.pid != server.process.pid


@needs_root
def test_killing_a_forked_task_s_sandbox_ends_its_task_and_the_trial_says_so(
    tmp_path: Path, make_spec: Callable[..., TrialSpec], digits_module: str,
) -> None:
    """The sandbox's pid 1 is the holder; the task, forked in from outside, dies with it."""
    killed: list[int] = []

    def on_events(events: list[TrialEvent]) -> None:
        for event in events:
            if event.kind == "metric" and not killed:
                [task] = [t for e in every if e.payload.get("phase") == "launched"
                          for t in e.payload["tasks"]]
                children = Path(f"/proc/{task['host']}/task/{task['host']}/children")
                holder = int(children.read_text().split()[0])
                os.kill(holder, signal.SIGKILL)
                killed.append(holder)
        every.extend(events)

    every: list[TrialEvent] = []
    spec = make_spec(work_dir=tmp_path / "work", model=digits_module,
                     hyperparameters={"epochs": 200})
    started = time.monotonic()
    outcome = trial_supervise(spec=spec, on_events=on_events, should_cancel=lambda: False,
                              runtime=runtime_for(name="sandbox", fork_server=True))
    assert killed, "the trial never reported a metric"
    assert outcome.status != "completed" and time.monotonic() - started < 120
    assert list(outcome.exit_codes.values()) == [128 + signal.SIGKILL], outcome


@needs_root
def test_the_machine_s_fork_server_serves_its_nodes_and_no_one_else(
    tmp_path: Path, make_spec: Callable[..., TrialSpec], digits_module: str,
) -> None:
    """One server for all the nodes of a machine (PLATFORM_TASK_FORK_SERVER_SOCKET): a node
    connects to it rather than importing TensorFlow itself; a process in another user namespace
    (a task's, were the socket ever in its sight) is hung up on; with no server there, a node
    forks from its own."""
    forks.fork_server_close()
    open_folder = tmp_path / "open"
    open_folder.mkdir(mode=0o755)
    refused = forks.ForkServer.start(python=TaskPython(), env=task_base_environment(),
                                     socket_path=str(open_folder / "socket"))
    assert refused.process is not None and refused.process.wait(timeout=30) != 0
    folder = tmp_path / "forks"
    folder.mkdir(mode=0o700)
    path = str(folder / "socket")
    machine = forks.ForkServer.start(python=TaskPython(), env=task_base_environment(),
                                     socket_path=path)
    try:
        runtime = runtime_for(name="sandbox", fork_server=True, fork_server_socket=path)
        spec = make_spec(work_dir=tmp_path / "shared", model=digits_module,
                         hyperparameters={"epochs": 1})
        outcome, events = _run_on(spec=spec, runtime=runtime)
        assert outcome.status == "completed", outcome.exit_reason
        assert [task["forked"] for task in _launched(events)] == [True]
        assert forks._server is not None and forks._server.process is None  # connected
        assert forks._server.socket_path == path
        stranger = subprocess.run(
            ["unshare", "--user", "--map-root-user", sys.executable, "-c",
             "import socket, sys\n"
             "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
             "s.connect(sys.argv[1]); s.settimeout(20)\n"
             "print('hung up' if s.recv(16) == b'' else 'served')", path],
            capture_output=True, text=True, timeout=60)
        assert stranger.stdout.strip() == "hung up", stranger.stderr
        forks.fork_server_close()
        gone = runtime_for(name="sandbox", fork_server=True,
                           fork_server_socket=str(folder / "no-server-here"))
        outcome, events = _run_on(spec=make_spec(work_dir=tmp_path / "own", model=digits_module,
                                                 hyperparameters={"epochs": 1}), runtime=gone)
        assert outcome.status == "completed", outcome.exit_reason
        assert [task["forked"] for task in _launched(events)] == [True]
        assert forks._server is not None and forks._server.process is not None  # its own
    finally:
        forks.fork_server_close()
        machine.close()
    assert machine.process is not None and machine.process.poll() is not None


def _run_on(*, spec: TrialSpec, runtime: Runtime) -> tuple[TrialOutcome, list[TrialEvent]]:
    events: list[TrialEvent] = []
    outcome = trial_supervise(spec=spec, on_events=events.extend, should_cancel=lambda: False,
                              runtime=runtime)
    return outcome, events
