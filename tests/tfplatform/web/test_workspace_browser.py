"""A workspace in a real Chromium: started from the workspaces page, JupyterLab opened through
the platform's proxy (HTTP and websockets, served as `tfplatform.config.asgi` is in production,
on an origin of its own: a second port, as `make run` and compose do),
a cell that lists TensorFlow's logical devices and trains a tiny model, a file saved to the home
volume and found again after a stop and a start; another user gets 404 on the lab and the API.
Under both isolating trial runtimes: the sandbox, and podman (a container of the environment's
image, the home bind-mounted, its `tfp` on the host's network narrowed to the API's port)."""

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests import live
from tests.factories import EnvironmentFactory, UserFactory
from tests.tfplatform.web.conftest import ARTIFACTS
from tests.tfplatform.web.test_browser import login
from tfplatform.cluster.models import Node
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.submission import experiment_cancel
from tfplatform.workspaces.models import Workspace
from training.isolation.container_settings import RUNTIME_IMAGE, ContainerSettings
from training.isolation.containers import LABEL_TRIAL

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser, pytest.mark.slow]

CELL = (
    "import numpy as np, tensorflow as tf\n"
    "print('DEVICES', [d.name for d in tf.config.list_logical_devices()])\n"
    "model = tf.keras.Sequential([tf.keras.layers.Dense(1)]); model.compile('sgd', 'mse')\n"
    "history = model.fit(np.ones((16, 2)), np.ones((16, 1)), epochs=3, verbose=0)\n"
    "open('from-notebook.txt', 'w').write('kept across restarts')\n"
    "print('TRAINED', len(history.history['loss']))"
)
# `tfp` in the workspace reaches the platform with the session's own token (its only way out
# under the sandbox: the node's relay socket), lists its session and submits an experiment.
# The web app's /metrics is not for it, whichever way the session reaches the web app.
CLI_CELL = (
    "import subprocess, os, socket, http.client\n"
    "run = subprocess.run(['tfp', 'workspace', 'list'], capture_output=True, text=True)\n"
    "print('CLI', run.returncode, run.stdout, run.stderr)\n"
    "open('from-lab.yaml', 'w').write('name: from-the-lab\\nmodel: mlp\\ndataset: digits\\n')\n"
    "run = subprocess.run(['tfp', 'submit', 'from-lab.yaml'], capture_output=True, text=True)\n"
    "print('SUBMIT', run.returncode, run.stdout[-200:], run.stderr[-300:])\n"
    "class Via(http.client.HTTPConnection):\n"
    "    def connect(self):\n"
    "        path = os.environ.get('TFP_UNIX_SOCKET')\n"
    "        if not path:\n"
    "            return super().connect()\n"
    "        self.sock = socket.socket(socket.AF_UNIX)\n"
    "        self.sock.connect(path)\n"
    "server = os.environ['TFP_SERVER'].split('//', 1)[1]\n"
    "metrics = Via(server)\n"
    "metrics.request('GET', '/metrics')\n"
    "print('METRICS', metrics.getresponse().status)"
)


def _run_cell(page: Any, *, index: int) -> None:
    """Run cell `index` and wait until the kernel has taken it (its prompt leaves `[ ]`).
    JupyterLab shows the kernel idle before its websocket has settled; a request it sends
    then is dropped without a trace, so it is sent again, at most three times."""
    prompt = page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").nth(index)
    for _ in range(3):
        page.locator(".jp-Notebook .jp-Cell .cm-content").nth(index).click()
        page.keyboard.press("Control+Enter")
        try:
            page.wait_for_function(
                "p => p.innerText.trim() !== '[ ]:'", arg=prompt.element_handle(), timeout=30_000)
            return
        except PlaywrightTimeout:
            continue
    pytest.fail(f"the kernel never took cell {index}: {page.inner_text('.jp-Notebook')}")


def _wait_output(page: Any, text: str) -> None:
    """Wait for a cell's output holding `text`; if it never comes, fail with what the notebook
    shows (and a screenshot), not just a timeout."""
    try:
        page.locator(".jp-OutputArea-output").filter(has_text=text).wait_for(timeout=180_000)
    except PlaywrightTimeout:
        page.screenshot(path=str(ARTIFACTS / "workspace-lab-timeout.png"))
        pytest.fail(f"no output with {text!r}; the notebook shows:\n"
                    f"{page.inner_text('.jp-Notebook')}")


@pytest.fixture(params=["sandbox", "podman"])
def platform(request: pytest.FixtureRequest, tmp_path: Path,
             short_dir: Path) -> Iterator[dict[str, Any]]:
    """A worker node with two GPU slots, the scheduler, the ASGI web app, and the same app again
    on the lab's own origin (a second port), as `make run` runs them."""
    homes = short_dir / "h"  # a Unix socket's path must fit in 108 bytes
    port, lab_port = live.free_port(), live.free_port()
    lab = f"http://127.0.0.1:{lab_port}"
    env = {"PLATFORM_HOME_DIR": str(homes), "PLATFORM_WORK_DIR": str(tmp_path / "work"),
           "PLATFORM_WORKSPACE_API_URL": f"http://127.0.0.1:{port}",
           "PLATFORM_WORKSPACE_LAB_ORIGIN": lab, "PLATFORM_TRIAL_RUNTIME": request.param}
    environment, engine = "", ""
    if request.param == "podman":
        engine = request.getfixturevalue("podman_engine")
        env |= {"PLATFORM_CONTAINER_ENGINE_URL": engine, "PLATFORM_CONTAINER_OCI_RUNTIME": "runc"}
        environment = EnvironmentFactory(name="node-runtime-image", image=RUNTIME_IMAGE,
                                         gpu_capable=True).name
    logs = {name: tmp_path / f"{name}.log" for name in ("worker", "scheduler", "web", "lab")}
    processes = [
        live.worker_start(node=f"wsb-{tmp_path.name[-6:]}", log=logs["worker"], gpu_slots=2,
                          **env),
        live.start([sys.executable, "manage.py", "scheduler", "--interval", "1"],
                   env=live.child_env(**env), log=logs["scheduler"]),
        live.start([sys.executable, "-m", "uvicorn", "tfplatform.config.asgi:application",
                    "--host", "127.0.0.1", "--port", str(port), "--ws", "websockets-sansio"],
                   env=live.child_env(PYTHONPATH="platform:.", **env), log=logs["web"]),
        live.start([sys.executable, "-m", "uvicorn", "tfplatform.config.asgi:application",
                    "--host", "127.0.0.1", "--port", str(lab_port), "--ws", "websockets-sansio"],
                   env=live.child_env(PYTHONPATH="platform:.", **env), log=logs["lab"]),
    ]
    live.wait_for(lambda: Node.objects.exists(), timeout=90, what="the node", log=logs["worker"])
    base = f"http://127.0.0.1:{port}"
    live.wait_for(lambda: live.http_status(f"{base}/healthz") == 200, timeout=60,
                  what="the ASGI web app", log=logs["web"])
    # Up, and nothing but the lab there.
    live.wait_for(lambda: live.http_status(f"{lab}/healthz") == 404, timeout=60,
                  what="the lab's origin", log=logs["lab"])
    yield {"base": base, "lab": lab, "homes": homes, "logs": logs, "environment": environment,
           "engine": engine}
    for process in processes:
        live.stop(process)


def _wait_state(page: Any, base: str, workspace_id: int, state: str, log: Path) -> None:
    def reached() -> bool:
        try:
            page.goto(f"{base}/workspaces/")
        except PlaywrightError as error:
            # The page's own refresh may abort a load in flight; the next poll loads it again.
            if "ERR_ABORTED" not in str(error):
                raise
            return False
        return bool(page.get_attribute(f"#workspace-{workspace_id}", "data-state") == state)

    live.wait_for(reached, timeout=240, what=f"workspace {workspace_id} {state}", log=log)


def test_workspace_in_the_browser(browser: Any, platform: dict[str, Any]) -> None:
    base, logs = platform["base"], platform["logs"]
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    page = browser.new_page()
    login(page, base, alice.username)
    page.goto(f"{base}/workspaces/")
    page.fill("#id_name", "notebook")
    page.fill("#id_gpus", "2")
    if platform["environment"]:
        page.select_option("#id_environment", platform["environment"])
    page.click("#workspace-new button[type=submit]")
    workspace = Workspace.objects.get(owner=alice)
    _wait_state(page, base, workspace.pk, "running", logs["worker"])
    if platform["engine"]:  # JupyterLab runs in a container of the environment's image
        session = Experiment.objects.get(pk=workspace.experiment_id)
        client = ContainerSettings(engine_url=platform["engine"], node="observer").client()
        [container] = client.containers.list(
            filters={"label": f"{LABEL_TRIAL}={session.trials.get().pk}"})
        assert container.image.tags == [f"{RUNTIME_IMAGE}"], container.image.tags
    row = page.inner_text(f"#workspace-{workspace.pk}")
    assert row.count("gpu:") == 2, row
    assert "Not live" in row  # resizing is said to be a restart
    page.screenshot(path=str(ARTIFACTS / "workspaces-running.png"))

    lab = f"{platform['lab']}/workspaces/{workspace.pk}/lab/lab"
    assert page.get_attribute(f"#workspace-{workspace.pk} a.open-lab", "href") == lab
    # Never on the platform's origin, where its pages would be the lab's to read.
    assert page.goto(f"{base}/workspaces/{workspace.pk}/lab/lab").status == 404
    answer = page.goto(lab)
    assert "sandbox allow-scripts" in answer.headers["content-security-policy"]
    assert "set-cookie" not in answer.headers  # Jupyter's cookies stay behind
    page.click(".jp-LauncherCard[data-category='Notebook']", timeout=120_000)
    editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
    editor.wait_for(timeout=60_000)
    # The kernel is idle once the notebook's kernel status says so.
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    editor.click()
    # Inserted, not typed: typed keys go through the editor's auto-indent and completer.
    page.keyboard.insert_text(CELL)
    _run_cell(page, index=0)
    _wait_output(page, "TRAINED")
    text = page.inner_text(".jp-OutputArea")
    page.screenshot(path=str(ARTIFACTS / "workspace-lab-cell.png"))
    assert "TRAINED 3" in text, text
    # Two GPU slots on a CPU-only node: two logical devices, as a trial gets them.
    assert "/device:CPU:0" in text and "/device:CPU:1" in text, text
    page.keyboard.press("Escape")
    page.keyboard.press("b")  # a new cell below, in command mode
    page.locator(".jp-Notebook .jp-Cell .cm-content").nth(1).click()
    page.keyboard.insert_text(CLI_CELL)
    _run_cell(page, index=1)
    _wait_output(page, "CLI")
    cli = page.locator(".jp-OutputArea-output").filter(has_text="CLI").inner_text()
    assert "CLI 0" in cli and "notebook" in cli and "running" in cli, cli
    _wait_output(page, "METRICS")
    assert "SUBMIT 0" in cli or "SUBMIT 0" in page.inner_text(".jp-Notebook"), cli
    # Submitted is what this test proves; its training would only take CPU from the rest.
    experiment_cancel(experiment=Experiment.objects.get(owner=alice, name="from-the-lab"))
    metrics = page.locator(".jp-OutputArea-output").filter(has_text="METRICS").inner_text()
    assert "METRICS 404" in metrics or "METRICS 401" in metrics, metrics
    home = platform["homes"] / f"user-{alice.pk}"
    assert (home / "from-notebook.txt").read_text() == "kept across restarts"
    # Nothing of Jupyter's token in any URL the browser saw.
    token_seen = page.evaluate("() => performance.getEntries().map(e => e.name).join(' ')")
    assert "token=" not in token_seen

    other = browser.new_page()
    login(other, base, bob.username)
    other.wait_for_url(f"{base}/experiments/")
    assert other.goto(lab).status == 404
    assert other.goto(f"{platform['lab']}/workspaces/{workspace.pk}/lab/api/contents").status \
        == 404
    assert other.request.get(f"{base}/api/v1/workspaces/{workspace.pk}/").status == 404

    page.goto(f"{base}/workspaces/")
    page.click(f"#workspace-{workspace.pk} button.stop")
    _wait_state(page, base, workspace.pk, "stopped", logs["worker"])
    assert page.goto(lab).status == 404  # no session: nothing to reach
    page.goto(f"{base}/workspaces/")
    page.click(f"#workspace-{workspace.pk} button.start")
    _wait_state(page, base, workspace.pk, "running", logs["worker"])
    found = page.request.get(
        f"{platform['lab']}/workspaces/{workspace.pk}/lab/api/contents/from-notebook.txt")
    assert found.status == 200 and found.json()["content"] == "kept across restarts"
    page.goto(f"{base}/workspaces/")
    page.click(f"#workspace-{workspace.pk} button.stop")
    _wait_state(page, base, workspace.pk, "stopped", logs["worker"])
