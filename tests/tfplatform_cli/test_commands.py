"""`tfp` end to end against the whole platform as `make run` starts it (gunicorn, scheduler,
worker node, model loader and model server in subprocesses, bench/stack.py): one experiment is
trained once for the module and the tests each check one thing about it, then an upload is
cancelled and a failing run fails `--wait`."""

import json
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from sklearn.datasets import load_digits

from bench.stack import Stack
from tests import live
from tests.factories import PASSWORD
from tests.tfplatform.modelregistry.conftest import HALF_PLUS_TWO, saved_model_zip
from tests.tfplatform_cli.conftest import TFP, TIMEOUT, Tfp

pytestmark = pytest.mark.slow

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



USERS_CREATE = f"""
from tfplatform.accounts.models import User
for name in ("alice", "bob"):
    User.objects.create_user(username=name, password={PASSWORD!r})
"""


@dataclass(frozen=True)
class Trained:
    stack: Stack
    alice: Tfp
    bob: Tfp
    experiment_id: int
    waited: str  # what `submit --wait` printed
    followed: str  # what `logs --follow` printed while it ran
    followed_notes: str
    listed: str  # `tfp list` while it ran


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not TFP.exists():
        pytest.fail(f"the tfp console script is not installed at {TFP}: run `make install`")
    with Stack(var_dir=tmp_path_factory.mktemp("stack") / "var", gpu_slots=0,
               cpu_slots=2) as running:
        running.manage("shell", "-c", USERS_CREATE)
        yield running


def _signed_in(*, stack: Stack, home: Path, name: str) -> Tfp:
    user = Tfp(home / name)
    logged_in = user(
        "login", "--server", stack.base_url, "--username", name, "--password-stdin",
        stdin=PASSWORD,
    )  # fmt: skip
    assert logged_in.returncode == 0, logged_in.stderr
    return user


@pytest.fixture(scope="module")
def trained(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Trained:
    home = tmp_path_factory.mktemp("users")
    alice = _signed_in(stack=stack, home=home, name="alice")
    bob = _signed_in(stack=stack, home=home, name="bob")
    spec = home / "digits.yaml"
    spec.write_text(SPEC)
    submitter = alice.popen("submit", "--wait", str(spec))
    follower = None
    try:
        assert submitter.stdout is not None
        experiment_id = int(submitter.stdout.readline())
        follower = alice.popen("logs", str(experiment_id), "--follow")
        listed = alice("list").stdout
        waited, waited_notes = submitter.communicate(timeout=TIMEOUT)
        followed, followed_notes = follower.communicate(timeout=TIMEOUT)
    finally:
        for process in (submitter, follower):
            if process is not None and process.poll() is None:
                process.kill()
    assert submitter.returncode == 0, (waited_notes, stack.log_tail("worker"))
    assert follower.returncode == 0, followed_notes
    return Trained(stack=stack, alice=alice, bob=bob, experiment_id=experiment_id,
                   waited=waited, followed=followed, followed_notes=followed_notes,
                   listed=listed)


@pytest.fixture(scope="module")
def deployed(trained: Trained) -> Path:
    """The trained experiment deployed as cli-digits; the path of a predict request for it."""
    answer = trained.alice("deploy", str(trained.experiment_id), "--name", "cli-digits", "--wait")
    assert answer.returncode == 0, (answer.stderr, trained.stack.log_tail("loader"))
    assert answer.stdout == (
        f"experiment {trained.experiment_id} deployed as cli-digits version 1 (available)\n"
    )
    request = trained.alice.home / "request.json"
    request.write_text(json.dumps({"instances": load_digits().data[:5].tolist()}))
    return request


def test_list_shows_the_running_experiment_under_its_owner(trained: Trained) -> None:
    header, row = trained.listed.splitlines()[:2]
    assert header.split() == [
        "ID", "NAME", "STATE", "MODEL", "DATASET", "STRATEGY", "OWNER", "CREATED", "TAGS",
    ]  # fmt: skip
    assert row.split()[0] == str(trained.experiment_id)
    assert "cli digits" in row and "alice" in row


def test_wait_and_follow_print_the_log_once_none_lost_or_repeated(trained: Trained) -> None:
    assert trained.followed_notes.splitlines()[-1] == (
        f"experiment {trained.experiment_id} completed"
    )
    logs = trained.alice("logs", str(trained.experiment_id)).stdout
    assert logs.count("--- trial 0 ---") == 1 and len(logs.splitlines()) > 2
    assert trained.followed == logs
    assert trained.waited == logs


def test_status_says_state_strategy_and_latest_metrics_for_people_and_scripts(
    trained: Trained,
) -> None:
    detail = json.loads(trained.alice("status", str(trained.experiment_id), "--json").stdout)
    assert detail["state"] == "completed" and detail["strategy"] == "default"
    assert detail["strategy_reason"]
    assert detail["latest_metrics"]["epoch"] == 2
    assert 0 <= detail["latest_metrics"]["values"]["val_accuracy"] <= 1
    status = trained.alice("status", str(trained.experiment_id)).stdout
    assert re.search(r"^state\s+completed$", status, re.MULTILINE), status
    assert re.search(r"^strategy\s+default \(.+\)$", status, re.MULTILINE), status
    assert re.search(r"^metrics\s+epoch 2: .*val_accuracy \d", status, re.MULTILINE), status
    completed = json.loads(trained.alice("list", "--state", "completed", "--json").stdout)
    assert trained.experiment_id in [e["id"] for e in completed]


def test_predict_answers_by_label_and_by_version(trained: Trained, deployed: Path) -> None:
    predicted = trained.alice("predict", "cli-digits", str(deployed))
    assert predicted.returncode == 0, predicted.stderr
    answer = json.loads(predicted.stdout)
    class_ids = [row["class_id"] for row in answer["predictions"]]
    assert len(class_ids) == 5 and all(c in range(10) for c in class_ids)
    assert predicted.stderr == "answered by cli-digits version 1 (label stable)\n"
    pinned = trained.alice("predict", "cli-digits", str(deployed), "--version", "1")
    assert json.loads(pinned.stdout) == answer
    assert pinned.stderr == "answered by cli-digits version 1\n"
    absent = trained.alice("predict", "cli-digits", str(deployed), "--version", "2")
    assert absent.returncode == 1 and absent.stderr.startswith("error: ")
    # The same answers from the model server itself, with the same token (its front).
    direct = trained.alice("predict", "cli-digits", str(deployed), "--direct")
    assert direct.returncode == 0, direct.stderr
    assert json.loads(direct.stdout) == answer and direct.stderr == predicted.stderr
    where = trained.alice("serving").stdout
    assert f"gRPC  {trained.stack.grpc_target}" in where
    assert f"REST  {trained.stack.rest_url}/v1/models/" in where


def _half_plus_two_registered(trained: Trained) -> None:
    """TF Serving's half_plus_two (it has classify and regress signatures) as alice's "half",
    uploaded through the API as a user does, loaded."""
    token = requests.post(f"{trained.stack.base_url}/api/v1/auth/token/", timeout=30,
                          json={"username": "alice", "password": PASSWORD}).json()["token"]
    headers = {"Authorization": f"Token {token}"}
    uploaded = requests.post(
        f"{trained.stack.base_url}/api/v1/models/", headers=headers, timeout=60,
        data={"model_name": "half"}, files={"file": saved_model_zip(HALF_PLUS_TWO)})
    assert uploaded.status_code == 202, uploaded.text
    live.wait_for(lambda: requests.get(f"{trained.stack.base_url}/api/v1/models/half/",
                                       headers=headers, timeout=30).json()["versions"][0]["state"]
                  != "loading", timeout=120, what="half to load")


def test_classify_regress_status_and_metadata_as_tf_serving_answers_them(
    trained: Trained, deployed: Path
) -> None:
    _half_plus_two_registered(trained)
    request = trained.alice.home / "examples.json"
    request.write_text(json.dumps({"signature_name": "regress_x_to_y",
                                   "examples": [{"x": 80.0}, {"x": 2.0}]}))
    regressed = trained.alice("regress", "half", str(request))
    assert regressed.returncode == 0, regressed.stderr
    assert json.loads(regressed.stdout) == {"results": [42.0, 3.0]}
    assert regressed.stderr == "answered by half version 1 (label stable)\n"
    classified = trained.alice("classify", "half", "-", "--version", "1", stdin=json.dumps(
        {"signature_name": "classify_x_to_y", "examples": [{"x": 20.0}]}))
    assert json.loads(classified.stdout) == {"results": [[["", 12.0]]]}
    status = json.loads(trained.alice("model-status", "cli-digits").stdout)
    assert [(v["version"], v["state"]) for v in status["model_version_status"]] == [
        ("1", "AVAILABLE")]
    metadata = trained.alice("model-metadata", "half", "--label", "stable")
    signatures = json.loads(metadata.stdout)["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "classify_x_to_y", "regress_x_to_y"} <= set(signatures)
    assert metadata.stderr == "answered by half version 1 (label stable)\n"
    for command in (("model-status", "half"), ("regress", "half", str(request)),
                    ("model-status", "half", "--direct"),
                    ("regress", "half", str(request), "--direct")):
        refused = trained.bob(*command)
        assert refused.returncode == 1, command
        assert refused.stderr == "error: Servable not found for request: Latest(half)\n", command


def test_deploy_tflite_serves_the_platforms_export_converted(
    trained: Trained, deployed: Path
) -> None:
    """The platform's own export of a trained model converts, and its TF Lite version answers
    as the SavedModel does."""
    answer = trained.alice("deploy", str(trained.experiment_id), "--name", "cli-digits-lite",
                           "--tflite", "--wait")
    assert answer.returncode == 0, (answer.stderr, trained.stack.log_tail("loader"))
    assert "deployed as cli-digits-lite version 1 (available)" in answer.stdout
    lite = json.loads(trained.alice("predict", "cli-digits-lite", str(deployed)).stdout)
    full = json.loads(trained.alice("predict", "cli-digits", str(deployed)).stdout)
    assert [row["class_id"] for row in lite["predictions"]] == [
        row["class_id"] for row in full["predictions"]]
    for mine, theirs in zip(lite["predictions"], full["predictions"], strict=True):
        assert mine["probabilities"] == pytest.approx(theirs["probabilities"], abs=1e-5)


def test_another_user_sees_nothing_of_alices(trained: Trained, deployed: Path) -> None:
    bob, experiment_id = trained.bob, trained.experiment_id
    assert json.loads(bob("list", "--json").stdout) == []
    for command in ("status", "logs", "cancel", "deploy"):
        refused = bob(command, str(experiment_id))
        assert (refused.returncode, refused.stderr) == (
            1,
            f"error: experiment {experiment_id} not found\n",
        ), command
    assert bob("predict", "cli-digits", str(deployed)).returncode == 1
    assert trained.alice("status", str(experiment_id)).returncode == 0  # nothing changed


def test_an_uploaded_module_is_cancelled_while_it_trains_and_only_by_its_owner(
    trained: Trained, tmp_path: Path
) -> None:
    alice, bob, stack = trained.alice, trained.bob, trained.stack
    log = stack.logs / "worker.log"
    # A user module uploaded from the spec's folder, not from where tfp runs.
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "digits_model.py").write_bytes(MODULE)
    upload_spec = tmp_path / "upload.yaml"
    upload_spec.write_text(UPLOAD_SPEC)
    submitted = alice("submit", str(upload_spec))
    assert submitted.returncode == 0, submitted.stderr
    upload_id = int(submitted.stdout)
    [stored] = stack.var_dir.rglob(f"{upload_id}-model.py")
    assert stored.read_bytes() == MODULE

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


def test_wait_makes_a_failed_run_a_failed_command_with_the_reason(
    trained: Trained, tmp_path: Path
) -> None:
    (tmp_path / "modules").mkdir()
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
    failed = trained.alice("submit", "--wait", str(wrong_spec))
    failed_id = int(failed.stdout.splitlines()[0])
    assert failed.returncode == 1
    assert failed.stderr.splitlines()[-1].startswith(f"error: experiment {failed_id} failed: ")
    assert "wrong output shape" in failed.stderr


def test_artifacts_are_listed_and_downloaded_by_their_owner_only(
    trained: Trained, tmp_path: Path
) -> None:
    experiment_id = str(trained.experiment_id)
    listed = json.loads(trained.alice("artifacts", experiment_id, "--json").stdout)
    assert [a["name"] for a in listed] == ["model", "checkpoints", "logs"]
    table = trained.alice("artifacts", experiment_id).stdout.splitlines()
    assert table[0].split() == ["NAME", "SIZE", "FILES", "CONTENTS"] and len(table) == 4

    downloaded = trained.alice("download", experiment_id, "model", "-o", str(tmp_path))
    assert downloaded.returncode == 0, downloaded.stderr
    target = tmp_path / f"experiment-{experiment_id}-model.zip"
    assert downloaded.stdout.startswith(f"{target} (")
    [model] = [a for a in listed if a["name"] == "model"]
    assert target.stat().st_size == model["size_bytes"]
    with zipfile.ZipFile(target) as archive:
        assert "model/saved_model.pb" in archive.namelist()
        assert archive.testzip() is None

    for args in (("artifacts", experiment_id), ("download", experiment_id, "model")):
        refused = trained.bob(*args)
        assert (refused.returncode, refused.stderr) == (
            1, f"error: experiment {experiment_id} not found\n"), args
    missing = trained.alice("download", experiment_id, "weights", "-o", str(tmp_path / "w.zip"))
    assert (missing.returncode, missing.stderr) == (
        1, "error: No artifact 'weights'; there are model, checkpoints, logs.\n")
    assert not list(tmp_path.glob("*w.zip*"))
