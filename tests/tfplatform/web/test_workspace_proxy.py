"""The workspace proxy's checks, before anything reaches a Jupyter: whose session, which
origin, which credentials. (Through to a real JupyterLab: test_workspace_browser.py.)"""

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.test import Client

from tests.factories import UserFactory
from tfplatform.accounts.tokens import api_token_issue
from tfplatform.config.asgi import application
from tfplatform.experiments.models import Experiment, Workspace
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.experiments.services.workspaces import WorkspaceRequest, workspace_create

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


async def _ask(path: str, *, method: str = "GET", headers: dict[str, str]) -> tuple[int, bytes]:
    scope = {
        "type": "http", "method": method, "path": path, "raw_path": path.encode(),
        "query_string": b"", "headers": [(k.encode(), v.encode()) for k, v in
                                         {"host": HOST, **headers}.items()],
        "http_version": "1.1", "scheme": "http", "server": (HOST, 80), "client": ("1.2.3.4", 5),
    }
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(timeout=10)
    body = await communicator.receive_output(timeout=10)
    return start["status"], body.get("body", b"")


def ask(path: str, *, method: str = "GET", headers: dict[str, str]) -> int:
    return async_to_sync(_ask)(path, method=method, headers=headers)[0]


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
