"""A web process killed in the middle of a publish leaves files behind: its staging copy (killed
while copying) or a version directory without a row (killed just after the rename). The sweep
removes them once they are old enough to be no publish under way, and a retry gets the version
number back; what a row names is never touched."""

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import peer_data_or_skip
from tests.factories import UserFactory
from tests.tfplatform.modelregistry.conftest import HALF_PLUS_THREE, HALF_PLUS_TWO, api, register
from tfplatform.modelregistry.services.publish import model_files_leftovers_remove

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[4]
# The platform's own publish, in a process of its own, stopped where a kill would stop it.
KILLED_WHILE_COPYING = """
import sys, time
from pathlib import Path
from serving.layout import publish_version

def stall(staging):
    print("copied", flush=True)
    time.sleep(600)

publish_version(source=Path(sys.argv[1]), model_base=Path(sys.argv[2]), model_name="kept",
                verify=stall)
"""
KILLED_BEFORE_ITS_ROW = """
import sys
from pathlib import Path
from serving.layout import publish_version

published = publish_version(source=Path(sys.argv[1]), model_base=Path(sys.argv[2]),
                            model_name="kept")
print(published.version, flush=True)
"""


def test_what_a_killed_publish_leaves_is_swept_and_a_retry_gets_its_number(
    model_server: dict[str, Any],
) -> None:
    base = model_server["base"]
    source = peer_data_or_skip() / "tf-serving-testdata" / HALF_PLUS_TWO / "00000123"
    args = [str(source), str(base)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    copying = subprocess.Popen([sys.executable, "-c", KILLED_WHILE_COPYING, *args], cwd=ROOT,
                               env=env, stdout=subprocess.PIPE, text=True)
    assert copying.stdout is not None
    assert copying.stdout.readline().strip() == "copied"
    copying.send_signal(signal.SIGKILL)
    copying.wait()
    renamed = subprocess.run([sys.executable, "-c", KILLED_BEFORE_ITS_ROW, *args], cwd=ROOT,
                             env=env, capture_output=True, text=True, check=True)
    assert renamed.stdout.strip() == "1"
    left = sorted(path.name for path in (base / "kept").iterdir())
    staging, version = left
    assert staging.startswith(".staging-") and version == "1"

    assert model_files_leftovers_remove() == []  # minutes old at most: perhaps still publishing
    removed = model_files_leftovers_remove(older_than=0)
    assert sorted(path.name for path in removed) == left
    assert list((base / "kept").iterdir()) == []

    client = api(UserFactory())
    retried = register(client, "kept")
    assert (retried["version"], retried["state"]) == (1, "available")
    assert model_files_leftovers_remove(older_than=0) == []  # its row names it
    assert (base / "kept" / "1" / "saved_model.pb").is_file()


def test_the_newest_version_undeployed_keeps_its_number_and_the_next_publish_gets_a_new_one(
    model_server: dict[str, Any],
) -> None:
    client = api(UserFactory())
    register(client, "renumbered")
    register(client, "renumbered", HALF_PLUS_THREE)
    gone = client.delete("/api/v1/models/renumbered/versions/2/")
    assert gone.status_code == 200, gone.content
    assert not (model_server["base"] / "renumbered" / "2").exists()  # its files went
    again = register(client, "renumbered", HALF_PLUS_THREE)
    assert (again["version"], again["state"]) == (3, "available")
    states = {v["version"]: v["state"]
              for v in client.get("/api/v1/models/renumbered/").json()["versions"]}
    assert states == {1: "available", 2: "unloaded", 3: "available"}
