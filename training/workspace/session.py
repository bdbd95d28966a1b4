"""A workspace session's task: JupyterLab, in the task host a trial would get.

    workspace_serve(spec=spec, events=events)   # returns when Jupyter stops (SIGTERM, shutdown)
    JupyterActivity(socket=..., token=...).poll()  # the node's view of its last activity

Jupyter listens on a Unix socket in the owner's home volume, never on a TCP port; the web app
reaches it there (web/workspace_proxy.py) with the session's random token. The task keeps the
trial's confinement: its only writable data is the home volume (its working dir and HOME),
kernels talk over IPC sockets in the sandbox's scratch space (Landlock allows no TCP port), and
its environment is the trial's allow-list plus the session's own API token for `tfp`.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import socket as socketlib
import sys
import time
from datetime import datetime
from pathlib import Path

from training.errors import UserCodeError
from training.events import EventWriter
from training.isolation.runtime import client_dir, repo_root
from training.isolation.sandbox import SCRATCH
from training.spec import TrialSpec
from training.workspace.kernel import GPU_MEMORY_ENV, GPUS_ENV

ACTIVITY_POLL_SECONDS = 30.0


class UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (Jupyter's `--ServerApp.sock`)."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def jupyter_status(*, socket: str, token: str, base_url: str = "/") -> dict[str, object] | None:
    """Jupyter's /api/status (kernels, connections, last_activity), or None while unreachable."""
    connection = UnixConnection(socket, timeout=5.0)
    try:
        connection.request("GET", f"{base_url.rstrip('/')}/api/status",
                           headers={"Authorization": f"token {token}"})
        response = connection.getresponse()
        body = response.read()
        return json.loads(body) if response.status == 200 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        connection.close()


class JupyterActivity:
    """Asks a session's Jupyter at most every `seconds` when it last saw kernel or terminal
    activity; `poll` returns that time when it asked, else None."""

    def __init__(self, *, socket: str, token: str, base_url: str = "/",
                 seconds: float = ACTIVITY_POLL_SECONDS) -> None:
        self.socket, self.token, self.base_url, self.seconds = socket, token, base_url, seconds
        self._last = float("-inf")

    def poll(self) -> datetime | None:
        now = time.monotonic()
        if now - self._last < self.seconds or not os.path.exists(self.socket):
            return None
        self._last = now
        status = jupyter_status(socket=self.socket, token=self.token, base_url=self.base_url)
        seen = status.get("last_activity") if status else None
        if not isinstance(seen, str):
            return None
        try:
            return datetime.fromisoformat(seen.replace("Z", "+00:00"))
        except ValueError:
            return None


def workspace_arguments(*, spec: TrialSpec) -> list[str]:
    session = spec.workspace
    return [
        f"--ServerApp.sock={session['socket']}",
        "--ServerApp.sock_mode=0600",
        f"--ServerApp.base_url={session.get('base_url', '/')}",
        f"--ServerApp.root_dir={spec.work_dir}",
        f"--IdentityProvider.token={session['jupyter_token']}",
        "--ServerApp.open_browser=False",
        # Requests arrive through the platform's proxy, with its Host header.
        "--ServerApp.allow_remote_access=True",
        "--KernelManager.transport=ipc",
        "--ServerApp.log_level=WARN",
    ]


def workspace_environment(*, spec: TrialSpec) -> dict[str, str]:
    """Added to the task's own allow-listed environment (inherited by kernels and terminals)."""
    session = spec.workspace
    scratch = Path(SCRATCH)
    return {
        "HOME": spec.work_dir,
        "TFP_SERVER": session.get("api_url", ""),
        "TFP_TOKEN": session.get("api_token", ""),
        GPUS_ENV: str(spec.resources.gpus_per_worker),
        GPU_MEMORY_ENV: str(spec.resources.gpu_memory_limit_mb),
        # Configuration the session cannot be talked out of: none from the home volume.
        "JUPYTER_CONFIG_DIR": str(scratch / "jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(scratch / "jupyter-runtime"),
        "JUPYTER_PATH": str(scratch / "jupyter-share"),
        "SHELL": "/bin/bash",
    }


def kernel_spec_write(*, folder: Path) -> None:
    """The one kernel: this interpreter (the environment's), its devices set up first."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, str(repo_root() / "training" / "workspace" / "kernel.py"), "-f",
                 "{connection_file}"],
        "display_name": "Python 3 (workspace devices)",
        "language": "python",
        "metadata": {"debugger": True},
    }
    (folder / "kernel.json").write_text(json.dumps(spec))


TFP_SCRIPT = """#!{python}
# `tfp` in a workspace: the package is loaded by its path, since Landlock lets the session
# read that folder but not list the one above it, where Python would look for it.
import importlib.util, sys
folder = {folder!r}
spec = importlib.util.spec_from_file_location(
    "tfplatform_cli", folder + "/__init__.py", submodule_search_locations=[folder])
module = importlib.util.module_from_spec(spec)
sys.modules["tfplatform_cli"] = module
spec.loader.exec_module(module)
from tfplatform_cli.main import main
sys.exit(main())
"""


def tfp_write(*, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "tfp"
    script.write_text(TFP_SCRIPT.format(
        python=sys.executable, folder=str(client_dir())))
    script.chmod(0o755)


def jupyterlab_check() -> None:
    """An environment (a venv, or an image with its own Python) may lack JupyterLab: the session
    fails saying what to add, not with an ImportError's traceback."""
    if importlib.util.find_spec("jupyterlab") is None:
        raise UserCodeError(
            "This environment has no JupyterLab, so it cannot be opened as a workspace: add "
            "`jupyterlab` to its packages (or its image)."
        )


def workspace_serve(*, spec: TrialSpec, events: EventWriter) -> None:
    jupyterlab_check()
    os.environ.update(workspace_environment(spec=spec))
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR"):
        Path(os.environ[name]).mkdir(parents=True, exist_ok=True)
    kernel_spec_write(folder=Path(os.environ["JUPYTER_PATH"]) / "kernels" / "python3")
    tools = Path(SCRATCH) / "bin"
    tfp_write(folder=tools)
    os.environ["PATH"] = f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"
    os.chdir(spec.work_dir)
    # Imported once Jupyter's paths are set in the environment, which it reads as it starts.
    from jupyterlab.labapp import LabApp  # type: ignore[import-untyped]

    events.emit("status", phase="workspace", socket=os.path.basename(spec.workspace["socket"]))
    server = LabApp.initialize_server(argv=workspace_arguments(spec=spec))
    # As JupyterHub does: the page never holds the token. The platform's proxy adds it to every
    # request, so the browser authenticates to the platform and never learns Jupyter's token.
    server.web_app.settings.setdefault("page_config_data", {})["token"] = ""
    server.start()
