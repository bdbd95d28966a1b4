"""`tfp workspace` against a live server: start, list, restart with other GPUs, stop, start
again; another user's workspace is "not found"."""

from collections.abc import Callable
from typing import Any

import pytest
from tfplatform_cli.workspace_commands import _row

from tests.tfplatform_cli.conftest import Tfp
from tests.tfplatform_cli.test_search_cli import signed_in
from tfplatform.experiments.models import Experiment
from tfplatform.workspaces.models import Workspace

pytestmark = pytest.mark.django_db(transaction=True)


def test_workspaces_from_the_command_line(live_server: Any, tfp: Callable[[str], Tfp]) -> None:
    alice = signed_in(tfp, live_server.url, "alice")
    started = alice("workspace", "start", "--name", "notebook", "--gpus", "1")
    assert started.returncode == 0, started.stderr
    workspace = Workspace.objects.get(name="notebook")
    # No node: it waits in the queue with the scheduler's reason.
    assert f"workspace {workspace.pk} (notebook) queued" in started.stdout

    listed = alice("workspace", "list")
    assert listed.returncode == 0 and "notebook" in listed.stdout and "queued" in listed.stdout
    assert alice("workspace", "list", "--json").stdout.lstrip().startswith("[")

    resized = alice("workspace", "restart", str(workspace.pk), "--gpus", "0")
    assert resized.returncode == 0, resized.stderr
    assert "new allocation" in resized.stdout
    workspace.refresh_from_db()
    assert workspace.gpus == 0
    assert Experiment.objects.filter(kind="workspace").count() == 2  # a new session

    bob = signed_in(tfp, live_server.url, "bob")
    refused = bob("workspace", "stop", str(workspace.pk))
    assert refused.returncode == 1 and f"workspace {workspace.pk} not found" in refused.stderr
    assert "No workspaces." in bob("workspace", "list").stdout

    stopped = alice("workspace", "stop", str(workspace.pk))
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped" in alice("workspace", "list").stdout
    again = alice("workspace", "start", str(workspace.pk))
    assert again.returncode == 0 and "queued" in again.stdout
    assert alice("workspace", "start").returncode == 1  # neither a name nor an id


def test_cpu_slots_from_the_command_line(live_server: Any, tfp: Callable[[str], Tfp]) -> None:
    alice = signed_in(tfp, live_server.url, "alice")
    started = alice("workspace", "start", "--name", "wide", "--cpu-slots", "3")
    assert started.returncode == 0, started.stderr
    workspace = Workspace.objects.get(name="wide")
    assert (workspace.gpus, workspace.cpu_slots) == (0, 3)
    listed = alice("workspace", "list").stdout.splitlines()
    assert listed[0].split()[:5] == ["id", "name", "state", "gpus", "cpu_slots"]
    assert listed[1].split()[3:5] == ["0", "3"]

    resized = alice("workspace", "restart", str(workspace.pk), "--cpu-slots", "2")
    assert resized.returncode == 0, resized.stderr
    workspace.refresh_from_db()
    assert workspace.cpu_slots == 2 and workspace.experiment is not None
    assert workspace.experiment.cpu_slots_per_worker == 2

    # The API's field errors, said by the CLI; nothing is made or changed.
    refused = alice("workspace", "start", "--name", "none", "--cpu-slots", "0")
    assert refused.returncode == 1 and "cpu_slots" in refused.stderr
    refused = alice("workspace", "restart", str(workspace.pk), "--gpus", "1", "--cpu-slots", "4")
    assert refused.returncode == 1 and "holds no CPU slots" in refused.stderr
    assert not Workspace.objects.filter(name="none").exists()
    workspace.refresh_from_db()
    assert (workspace.gpus, workspace.cpu_slots) == (0, 2)


@pytest.mark.parametrize(("lab_url", "shown"), [
    ("/workspaces/4/lab/", "https://tfp.example/workspaces/4/lab/"),
    ("http://127.0.0.1:8100/workspaces/4/lab/", "http://127.0.0.1:8100/workspaces/4/lab/"),
])
def test_the_listed_url_is_the_labs_own_origin_or_the_servers(lab_url: str, shown: str) -> None:
    running = {"id": 4, "name": "n", "state": "running", "gpus": 0, "cpu_slots": 1,
               "devices": ["a/cpu:0"], "lab_url": lab_url}
    assert _row(running, server="https://tfp.example")[-1] == shown
    assert _row({**running, "state": "queued"}, server="https://tfp.example")[-1] == "-"
