"""The workspace proxy's checks, before anything reaches a Jupyter: whose session, which
origin, which credentials; and what of a real JupyterLab's answers reaches the browser (its
cookies do not, the lab's policy comes with them). (In a browser: test_workspace_browser.py.)"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.test import Client

from tests import live
from tests.factories import NodeFactory, TrialFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.accounts.tokens import api_token_issue
from tfplatform.cluster.models import Allocation, Node
from tfplatform.config.asgi import application
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.web.workspace_proxy import LAB_POLICY
from tfplatform.workspaces.models import Workspace
from tfplatform.workspaces.relay import relay_start
from tfplatform.workspaces.services import (
    WorkspaceRequest,
    workspace_create,
    workspace_jupyter_token,
    workspace_socket,
)
from training.spec import TrialSpec
from training.workspace.session import UnixConnection, jupyter_status, workspace_arguments

pytestmark = pytest.mark.django_db(transaction=True)
HOST = "testserver"


def _running_workspace(owner: Any) -> Workspace:
    workspace = workspace_create(owner=owner, request=WorkspaceRequest(name="w"))
    session = workspace.experiment
    assert session is not None
    experiment_transition(experiment=session, to=Experiment.State.SCHEDULED)
    experiment_transition(experiment=session, to=Experiment.State.RUNNING)
    return workspace


def _session_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


async def _ask(path: str, *, method: str = "GET", headers: dict[str, str]) -> Answer:
    scope = {
        "type": "http", "method": method, "path": path, "raw_path": path.encode(),
        "query_string": b"", "headers": [(k.encode(), v.encode()) for k, v in
                                         {"host": HOST, **headers}.items()],
        "http_version": "1.1", "scheme": "http", "server": (HOST, 80), "client": ("1.2.3.4", 5),
    }
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(timeout=30)
    body = b""
    while True:
        message = await communicator.receive_output(timeout=30)
        body += message.get("body", b"")
        if not message.get("more_body"):
            return start["status"], start["headers"], body


def answer(path: str, *, method: str = "GET", headers: dict[str, str]) -> Answer:
    return async_to_sync(_ask)(path, method=method, headers=headers)


def ask(path: str, *, method: str = "GET", headers: dict[str, str]) -> int:
    return answer(path, method=method, headers=headers)[0]


def test_only_the_owner_from_the_platforms_origin_gets_through() -> None:
    alice, bob = UserFactory(), UserFactory()
    workspace = _running_workspace(alice)
    lab = f"/workspaces/{workspace.pk}/lab/api/contents"
    alice_cookie, bob_cookie = _session_cookie(alice), _session_cookie(bob)
    _, alice_key = api_token_issue(user=alice, name="t")

    assert ask(lab, headers={}) == 404  # nobody
    assert ask(lab, headers={"cookie": bob_cookie}) == 404
    assert ask(f"/workspaces/{workspace.pk + 1}/lab/",
               headers={"cookie": alice_cookie}) == 404
    # Jupyter's own token is no way in: only the platform's credentials count.
    assert ask(lab, headers={"authorization": "token not-a-platform-token"}) == 404
    # A state change from another site (CSRF) stops here, with the owner's cookie.
    assert ask(lab, method="POST", headers={
        "cookie": alice_cookie, "origin": "https://evil.example"}) == 404
    # The owner, by cookie or by token, passes every check; no Jupyter answers yet (starting).
    assert ask(lab, headers={"cookie": alice_cookie}) == 503
    assert ask(lab, headers={"authorization": f"Token {alice_key}"}) == 503
    assert ask(lab, method="POST", headers={
        "cookie": alice_cookie, "origin": f"http://{HOST}"}) == 503


def test_with_a_lab_origin_the_lab_answers_there_only_and_nothing_else_does(
    settings: Any, platform_settings_override: PlatformSettingsOverride,
) -> None:
    """Lab content must not share an origin with the platform's pages: it would read them
    with the user's session."""
    platform_settings_override(workspace_lab_origin="https://lab.test:8443")
    alice = UserFactory()
    workspace = _running_workspace(alice)
    cookie = {"cookie": _session_cookie(alice)}
    lab = f"/workspaces/{workspace.pk}/lab/api/contents"
    assert ask(lab, headers=cookie) == 404  # on the platform's origin
    assert ask(lab, headers={**cookie, "host": "lab.test:8443"}) == 503  # through: not started
    for page in ("/healthz", "/accounts/login/", "/api/v1/workspaces/"):
        assert ask(page, headers={**cookie, "host": "lab.test:8443"}) == 404, page
    assert ask("/healthz", headers={}) == 200  # the platform's own origin is the platform's
    # A default port is the same origin, written or not.
    platform_settings_override(workspace_lab_origin="https://LAB.test")
    for host in ("lab.test", "lab.test:443"):
        assert ask(lab, headers={**cookie, "host": host}) == 503, host
    assert ask(lab, headers={**cookie, "host": "lab.test:8443"}) == 404
    assert ask(lab, headers={**cookie, "host": "lab.test:x"}) == 404


@pytest.fixture
def short_home(settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> Iterator[Path]:
    """Homes under a short path: a Unix socket's path has at most 107 bytes."""
    home = Path(tempfile.mkdtemp(prefix="wsp-"))
    platform_settings_override(home_dir=home)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def _jupyter_start(*, socket: Path, base_url: str, token: str, root: Path) -> subprocess.Popen:
    """JupyterLab with a session's own arguments (training/workspace/session.py), outside a
    sandbox."""
    spec = TrialSpec(trial_id="1", model="workspace", dataset="", work_dir=str(root),
                     workspace={"socket": str(socket), "jupyter_token": token,
                                "base_url": base_url})
    for name in ("config", "runtime", "data"):
        (root / name).mkdir(parents=True)
    env = {**os.environ, "HOME": str(root), "JUPYTER_CONFIG_DIR": str(root / "config"),
           "JUPYTER_RUNTIME_DIR": str(root / "runtime"), "JUPYTER_DATA_DIR": str(root / "data")}
    root_flag = ["--allow-root"] if os.geteuid() == 0 else []
    process = subprocess.Popen([sys.executable, "-m", "jupyterlab", *root_flag,
                                *workspace_arguments(spec=spec)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while jupyter_status(socket=str(socket), token=token, base_url=base_url) is None:
        assert process.poll() is None and time.monotonic() < deadline, "JupyterLab did not start"
        time.sleep(0.2)
    return process


def _direct_headers(*, socket: Path, path: str, token: str) -> dict[str, list[str]]:
    connection = UnixConnection(str(socket))
    try:
        connection.request("GET", path, headers={"Authorization": f"token {token}"})
        response = connection.getresponse()
        response.read()
        found: dict[str, list[str]] = {}
        for name, value in response.getheaders():
            found.setdefault(name.lower(), []).append(value)
        return found
    finally:
        connection.close()


def test_jupyters_cookies_stay_behind_and_its_answers_carry_the_labs_policy(
    short_home: Path,
) -> None:
    alice = UserFactory()
    workspace = _running_workspace(alice)
    session = workspace.experiment
    assert session is not None
    socket = workspace_socket(owner_id=alice.pk, experiment_id=session.pk)
    socket.parent.mkdir(parents=True)
    base = f"/workspaces/{workspace.pk}/lab/"
    token = workspace_jupyter_token(experiment_id=session.pk)
    jupyter = _jupyter_start(socket=socket, base_url=base, token=token, root=short_home / "r")
    try:
        # What Jupyter itself answers: cookies for the host, whatever its port (its _xsrf and
        # an identity), and a policy of its own.
        direct = _direct_headers(socket=socket, path=f"{base}lab", token=token)
        assert len(direct["set-cookie"]) >= 1 and direct["content-security-policy"]
        cookie = {"cookie": _session_cookie(alice)}
        for path in (f"{base}lab", f"{base}api/contents", f"{base}api/nothing-here"):
            status, headers, _ = answer(path, headers=cookie)
            assert status == (404 if "nothing" in path else 200), (path, status)
            names = [name for name, _ in headers]
            assert b"set-cookie" not in names and b"set-cookie2" not in names, path
            policies = [value.decode() for name, value in headers
                        if name == b"content-security-policy"]
            # The lab's, and Jupyter's own too: a browser enforces both.
            assert LAB_POLICY in policies and len(policies) == 2, (path, policies)
        assert b"JupyterLab" in answer(f"{base}lab", headers=cookie)[2]
        # The proxy's own answers carry the policy too.
        _, headers, _ = answer(f"/workspaces/{workspace.pk + 1}/lab/", headers=cookie)
        assert (b"content-security-policy", LAB_POLICY.encode()) in headers
    finally:
        jupyter.terminate()
        jupyter.wait(timeout=30)


def test_with_a_relay_the_lab_reaches_the_jupyter_of_another_machine_through_its_node(
    short_home: Path, platform_settings_override: PlatformSettingsOverride,
) -> None:
    """PLATFORM_WORKSPACE_RELAY_PORT: the lab opens no socket itself (the session's socket is
    on its node's machine); it connects to the node holding the session, which relays."""
    relay = relay_start(address="127.0.0.1", port=live.free_port())
    platform_settings_override(workspace_relay_port=relay.port)
    alice = UserFactory()
    workspace = _running_workspace(alice)
    session = workspace.experiment
    assert session is not None
    Allocation.objects.create(holder=TrialFactory(experiment=session),
                              node=NodeFactory(address="127.0.0.1"))
    socket = workspace_socket(owner_id=alice.pk, experiment_id=session.pk)
    socket.parent.mkdir(parents=True)
    base = f"/workspaces/{workspace.pk}/lab/"
    jupyter = _jupyter_start(socket=socket, base_url=base, token=workspace_jupyter_token(
        experiment_id=session.pk), root=short_home / "r")
    cookie = {"cookie": _session_cookie(alice)}
    try:
        status, _, body = answer(f"{base}api/contents", headers=cookie)
        assert status == 200 and b'"type": "directory"' in body, body[:500]
        assert b"JupyterLab" in answer(f"{base}lab", headers=cookie)[2]
        # Where the session's node is not (nothing relays there), the lab is unavailable.
        Node.objects.update(address="127.0.0.2")
        assert ask(f"{base}api/contents", headers=cookie) == 503
    finally:
        jupyter.terminate()
        jupyter.wait(timeout=30)
        relay.close()
