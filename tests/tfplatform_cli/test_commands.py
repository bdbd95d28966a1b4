"""`tfp` end to end: a real server, worker node and model server; train, follow, deploy, predict."""

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import live
from tests.factories import PASSWORD, UserFactory
from tests.tfplatform_cli.conftest import TIMEOUT, Tfp
from tfplatform.experiments.models import Experiment

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SPEC = """\
name: cli digits
model: mlp
dataset: digits
hyperparameters:
  epochs: 2
  batch_size: 32
  learning_rate: 0.01
resources:
  workers: 1
"""

UPLOAD_SPEC = """\
name: cli upload
model: upload
model_file: modules/digits_model.py  # relative to this file, not to where tfp runs
dataset: digits
hyperparameters: {epochs: 500, batch_size: 8}
"""

MODULE = b"""
import tf_keras as keras


def build_model(hparams):
    return keras.Sequential([
        keras.Input(shape=hparams["input_shape"]),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(hparams["num_classes"], activation="softmax"),
    ])
"""


WRONG_SHAPE_MODULE = b"""
import tf_keras as keras


def build_model(hparams):
    # digits has 10 classes: 3 outputs is the user's mistake.
    return keras.Sequential([keras.Input(shape=(64,)), keras.layers.Dense(3, activation="softmax")])
"""


def test_train_follow_deploy_predict_and_cancel_an_upload_through_tfp(
    live_server: Any,
    worker_node: tuple[str, Path],
    model_server: dict[str, Any],
    tfp: Callable[[str], Tfp],
    tmp_path: Path,
) -> None:
    _, log = worker_node
    alice, bob = tfp("alice"), tfp("bob")
    for name, user in (("alice", alice), ("bob", bob)):
        UserFactory(username=name)
        logged_in = user(
            "login", "--server", live_server.url, "--username", name, "--password-stdin",
            stdin=PASSWORD,
        )  # fmt: skip
        assert logged_in.returncode == 0, logged_in.stderr

    spec = tmp_path / "digits.yaml"
    spec.write_text(SPEC)
    submitter = alice.popen("submit", "--wait", str(spec))
    follower = None
    try:
        assert submitter.stdout is not None
        experiment_id = int(submitter.stdout.readline())
        follower = alice.popen("logs", str(experiment_id), "--follow")

        listed = alice("list")
        assert listed.stdout.splitlines()[0].split() == [
            "ID", "NAME", "STATE", "MODEL", "DATASET", "STRATEGY", "OWNER", "CREATED",
        ]  # fmt: skip
        row = listed.stdout.splitlines()[1]
        assert row.split()[0] == str(experiment_id) and "cli digits" in row and "alice" in row

        waited, waited_notes = submitter.communicate(timeout=TIMEOUT)
        followed, followed_notes = follower.communicate(timeout=TIMEOUT)
    finally:
        for process in (submitter, follower):
            if process is not None and process.poll() is None:
                process.kill()
    assert submitter.returncode == 0, (waited_notes, log.read_text()[-3000:])
    assert follower.returncode == 0, followed_notes
    assert followed_notes.splitlines()[-1] == f"experiment {experiment_id} completed"

    # Followed while it ran, printed once it was over: the same lines, none lost or repeated.
    logs = alice("logs", str(experiment_id)).stdout
    assert logs.count("--- trial 0 ---") == 1 and len(logs.splitlines()) > 2
    assert followed == logs
    assert waited == logs

    experiment = Experiment.objects.get(pk=experiment_id)
    status = alice("status", str(experiment_id)).stdout
    assert re.search(r"^state\s+completed$", status, re.MULTILINE), status
    assert re.search(rf"^strategy\s+{experiment.strategy} \(.+\)$", status, re.MULTILINE), status
    assert re.search(r"^metrics\s+epoch 2: .*val_accuracy \d", status, re.MULTILINE), status
    detail = json.loads(alice("status", str(experiment_id), "--json").stdout)
    assert (detail["state"], detail["strategy"]) == ("completed", experiment.strategy)
    assert detail["strategy_reason"] == experiment.strategy_reason
    assert detail["latest_metrics"]["epoch"] == 2
    assert 0 <= detail["latest_metrics"]["values"]["val_accuracy"] <= 1
    completed = json.loads(alice("list", "--state", "completed", "--json").stdout)
    assert [e["id"] for e in completed] == [experiment_id]

    deployed = alice("deploy", str(experiment_id), "--name", "cli-digits", "--wait")
    assert deployed.returncode == 0, deployed.stderr
    assert (
        deployed.stdout
        == f"experiment {experiment_id} deployed as cli-digits version 1 (available)\n"
    )

    from sklearn.datasets import load_digits

    request = tmp_path / "request.json"
    request.write_text(json.dumps({"instances": load_digits().data[:5].tolist()}))
    predicted = alice("predict", "cli-digits", str(request))
    assert predicted.returncode == 0, predicted.stderr
    answer = json.loads(predicted.stdout)
    class_ids = [row["class_id"] for row in answer["predictions"]]
    assert len(class_ids) == 5 and all(c in range(10) for c in class_ids)
    assert predicted.stderr == "answered by cli-digits version 1 (label stable)\n"
    pinned = alice("predict", "cli-digits", str(request), "--version", "1")
    assert json.loads(pinned.stdout) == answer
    assert pinned.stderr == "answered by cli-digits version 1\n"
    absent = alice("predict", "cli-digits", str(request), "--version", "2")
    assert absent.returncode == 1 and absent.stderr.startswith("error: ")

    # Bob's token sees nothing of Alice's.
    assert json.loads(bob("list", "--json").stdout) == []
    for command in ("status", "logs", "cancel", "deploy"):
        refused = bob(command, str(experiment_id))
        assert (refused.returncode, refused.stderr) == (
            1,
            f"error: experiment {experiment_id} not found\n",
        ), command
    assert bob("predict", "cli-digits", str(request)).returncode == 1

    # A user module uploaded from the spec's folder; cancelled while it trains.
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "digits_model.py").write_bytes(MODULE)
    upload_spec = tmp_path / "upload.yaml"
    upload_spec.write_text(UPLOAD_SPEC)
    submitted = alice("submit", str(upload_spec))
    assert submitted.returncode == 0, submitted.stderr
    upload_id = int(submitted.stdout)
    assert Experiment.objects.get(pk=upload_id).model_file.read() == MODULE

    def status_of_upload(user: Tfp) -> dict[str, Any]:
        return dict(json.loads(user("status", str(upload_id), "--json").stdout))

    def state(user: Tfp) -> str:
        return str(status_of_upload(user)["state"])

    live.wait_for(
        lambda: status_of_upload(alice)["latest_metrics"], timeout=180, what="training", log=log
    )
    assert bob("cancel", str(upload_id)).returncode == 1
    assert state(alice) == "running"
    canceled = alice("cancel", str(upload_id))
    assert canceled.returncode == 0, canceled.stderr
    assert canceled.stdout.startswith(f"experiment {upload_id}")
    ended = alice("logs", str(upload_id), "--follow")
    assert ended.returncode == 0
    assert ended.stderr.splitlines()[-1] == f"experiment {upload_id} canceled"
    assert state(alice) == "canceled"
    again = alice("cancel", str(upload_id))
    assert (again.returncode, again.stderr) == (1, "error: The experiment is already canceled.\n")
    not_deployable = alice("deploy", str(upload_id))
    assert not_deployable.returncode == 1
    assert "Only a completed experiment" in not_deployable.stderr

    # --wait makes a failed run a failed command, with the platform's reason.
    (tmp_path / "modules" / "wrong.py").write_bytes(WRONG_SHAPE_MODULE)
    wrong_spec = tmp_path / "wrong.json"
    wrong_spec.write_text(
        json.dumps(
            {
                "name": "wrong shape",
                "model": "upload",
                "model_file": "modules/wrong.py",
                "dataset": "digits",
                "max_restarts": 0,
                "hyperparameters": {"epochs": 1},
            }
        )
    )
    failed = alice("submit", "--wait", str(wrong_spec))
    failed_id = int(failed.stdout.splitlines()[0])
    assert failed.returncode == 1
    assert failed.stderr.splitlines()[-1].startswith(f"error: experiment {failed_id} failed: ")
