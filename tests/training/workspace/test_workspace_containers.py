"""A workspace session under the podman runtime, in an environment image that brings its own
Python: TensorFlow and JupyterLab from the image (the derived build installs them as the
environment's packages), on a Unix socket in the bind-mounted home, its `tfp` baked in beside
the harness, its kernel without a network, reaching the API only through the node's relay
socket; the container is sized by the two CPU slots the session holds."""

import json
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import unix_connect

from tests import live
from tests.images import OWN_PYTHON_PACKAGES
from training.catalog import WORKSPACE_JOB
from training.isolation.container_settings import ContainerSettings
from training.isolation.containers import LABEL_TRIAL, containers_reap
from training.isolation.images import image_derive, image_key
from training.isolation.runtime import Runtime
from training.isolation.runtime_factory import runtime_for
from training.spec import Resources
from training.supervisor.supervise import trial_supervise
from training.workspace.session import UnixConnection, jupyter_status

pytestmark = pytest.mark.slow

MEMORY_PER_SLOT = 2**30

TOKEN = "jupyter-token-of-this-session"
KERNEL_CODE = """
import socket, subprocess
def reach(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        return "open"
    except PermissionError:
        return "denied"
    except OSError as error:
        return type(error).__name__
def bind(port):
    server = socket.socket()
    try:
        server.bind(("127.0.0.2", port))  # the API's port on another address: free to take
        return "bound"
    except PermissionError:
        return "denied"
    except OSError as error:
        return type(error).__name__
    finally:
        server.close()
def relay():
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(__import__("os").environ["TFP_UNIX_SOCKET"])
        sock.sendall(b"through the relay")
    return "sent"
run = subprocess.run(["tfp", "--help"], capture_output=True, text=True)
print("WHERE", __import__("sys").executable, open("note.txt").read())
print("REACH", reach({api}), reach({other}), bind({api}), relay())
print("TFP", run.returncode, "workspace" in run.stdout, run.stderr[-300:])
"""


@pytest.fixture(scope="module")
def podman(podman_engine: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    node = f"ws-{tmp_path_factory.getbasetemp().name}"
    settings = ContainerSettings(engine_url=podman_engine, node=node, oci_runtime="runc",
                                 memory_bytes=MEMORY_PER_SLOT)
    yield runtime_for(name="podman", containers=settings)
    containers_reap(settings=settings)


@pytest.fixture
def listeners() -> Iterator[tuple[int, int, socket.socket]]:
    """Two listening ports on the host's loopback: the API's, and any other service's."""
    with socket.socket() as api, socket.socket() as other:
        for server in (api, other):
            server.bind(("127.0.0.1", 0))
            server.listen(8)
        yield int(api.getsockname()[1]), int(other.getsockname()[1]), api


def _session(make_spec: Callable[..., Any], home: Path, api_port: int) -> Any:
    sock = home / ".sockets" / "jupyter-1.sock"
    sock.parent.mkdir(parents=True)
    return make_spec(work_dir=home, model=WORKSPACE_JOB, dataset="", hyperparameters={},
                     resources=Resources(cpu_slots_per_worker=2),
                     workspace={"jupyter_token": TOKEN, "socket": str(sock), "base_url": "/",
                                "api_token": "t", "api_url": f"http://127.0.0.1:{api_port}"})


def _jupyter(sock: str, method: str, path: str, body: Any = None) -> Any:
    connection = UnixConnection(sock)
    connection.request(method, path, body=json.dumps(body) if body is not None else None,
                       headers={"Authorization": f"token {TOKEN}"})
    response = connection.getresponse()
    data = response.read()
    connection.close()
    assert response.status in (200, 201), (response.status, data[:300])
    return json.loads(data) if data else None


def _execute(sock: str, kernel: str, code: str) -> str:
    """Runs `code` in the kernel over Jupyter's websocket; returns what it printed."""
    session = uuid.uuid4().hex

    def message(msg_type: str, content: dict[str, Any]) -> str:
        header = {"msg_id": uuid.uuid4().hex, "session": session, "username": "test",
                  "msg_type": msg_type, "version": "5.3", "date": ""}
        return json.dumps({"header": header, "parent_header": {}, "metadata": {},
                           "content": content, "channel": "shell", "buffers": []})

    with unix_connect(sock, f"ws://localhost/api/kernels/{kernel}/channels",
                      additional_headers={"Authorization": f"token {TOKEN}"},
                      open_timeout=120) as ws:  # a loaded machine: Jupyter answers late
        # The kernel may not listen yet: ask until it answers, then send the code once.
        for _ in range(60):
            ws.send(message("kernel_info_request", {}))
            try:
                while json.loads(ws.recv(timeout=2))["msg_type"] != "kernel_info_reply":
                    pass
                break
            except TimeoutError:
                continue
        ws.send(message("execute_request", {"code": code, "silent": False,
                                            "store_history": False, "user_expressions": {},
                                            "allow_stdin": False, "stop_on_error": True}))
        printed = []
        while True:
            reply = json.loads(ws.recv(timeout=120))
            if reply["msg_type"] == "stream":
                printed.append(reply["content"]["text"])
            elif reply["msg_type"] == "error":
                printed.append("\n".join(reply["content"]["traceback"]))
            elif reply["msg_type"] == "execute_reply":
                return "".join(printed)


def test_a_workspace_runs_jupyterlab_from_the_environments_own_image(
    podman: Runtime, python_image: str, make_spec: Callable[..., Any], tmp_path: Path,
    short_dir: Path, listeners: tuple[int, int, socket.socket],
) -> None:
    assert podman.containers is not None
    key = image_key(settings=podman.containers, base=python_image, packages=OWN_PYTHON_PACKAGES)
    python = image_derive(settings=podman.containers, base=python_image,
                          packages=OWN_PYTHON_PACKAGES, key=key, log_path=tmp_path / "build.log")
    # Its sockets (Jupyter's, the API relay's) live below these: tmp_path is too deep for one.
    home = short_dir / "h"
    spec = _session(make_spec, home, listeners[0])
    stop = threading.Event()
    outcome: list[Any] = []
    events: list[Any] = []
    supervisor = threading.Thread(target=lambda: outcome.append(trial_supervise(
        spec=spec, on_events=events.extend, should_cancel=stop.is_set, grace_seconds=10,
        runtime=podman, python=python, run_dir=str(short_dir / "runs"))))
    supervisor.start()
    sock = spec.workspace["socket"]
    try:
        def answers() -> bool:
            assert supervisor.is_alive(), (outcome, [e.payload for e in events][-5:])
            return jupyter_status(socket=sock, token=TOKEN) is not None

        live.wait_for(answers, timeout=180, what="JupyterLab in the container")
        # Two CPU slots: two slots' memory and CPU weight.
        assert podman.containers is not None
        [container] = podman.containers.client().containers.list(
            filters={"label": f"{LABEL_TRIAL}={spec.trial_id}"})
        limits = container.attrs["HostConfig"]
        assert (limits["Memory"], limits["CpuShares"]) == (2 * MEMORY_PER_SLOT, 2 * 1024)
        _jupyter(sock, "PUT", "/api/contents/note.txt",
                 {"type": "file", "format": "text", "content": "in the home"})
        kernel = _jupyter(sock, "POST", "/api/kernels", {"name": "python3"})["id"]
        printed = _execute(sock, kernel, KERNEL_CODE.format(api=listeners[0],
                                                            other=listeners[1]))
    finally:
        stop.set()
        supervisor.join(timeout=120)
    assert "WHERE /usr/bin/python3 in the home" in printed, printed  # the image's own Python
    # No network at all (Landlock refuses other ports before that): the API only through the
    # node's relay socket, which reached it.
    assert "REACH ConnectionRefusedError denied denied sent" in printed, printed
    listeners[2].settimeout(10)
    relayed, _ = listeners[2].accept()
    with relayed:
        assert relayed.recv(64) == b"through the relay"
    assert "TFP 0 True" in printed, printed
    assert (home / "note.txt").read_text() == "in the home"
    assert outcome and outcome[0].status == "canceled", outcome
