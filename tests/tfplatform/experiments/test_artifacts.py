"""A finished experiment's SavedModel, checkpoints and logs download as zips of announced size,
from the API and the page, by those who may see the experiment only; the SavedModel loads; a link
the trial planted in its work directory is not followed."""

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from rest_framework.test import APIClient

from tests import live
from tests.factories import ExperimentFactory, UserFactory
from tfplatform.experiments.services.execution import experiment_work_dir

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LOAD_AND_PREDICT = """
import sys
import numpy as np
import tensorflow as tf
served = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
print(served(inputs=tf.constant(np.zeros((3, 64)), tf.float32))["probabilities"].shape)
"""


def test_a_finished_experiment_downloads_its_model_checkpoints_and_logs(
    worker_node: tuple[str, Path], tmp_path: Path
) -> None:
    _, log = worker_node
    owner = UserFactory()
    api = APIClient()
    api.force_authenticate(owner)
    created = api.post("/api/v1/experiments/", {
        "name": "to download", "model": "mlp", "dataset": "digits",
        "hyperparameters": {"epochs": 2, "batch_size": 64}}, format="json")
    assert created.status_code == 201, created.content
    experiment_id = created.json()["id"]
    assert api.get(f"/api/v1/experiments/{experiment_id}/artifacts/").json() == []
    assert api.get(f"/api/v1/experiments/{experiment_id}/artifacts/model/").status_code == 409
    state = live.experiment_wait_finished(experiment_id, timeout=240, log=log)
    assert state == "completed", log.read_text()[-3000:]
    # What a hostile trial could leave: a link to the platform's secrets beside its export.
    secret = settings.VAR_DIR / "secret_key"
    (experiment_work_dir(experiment_id=experiment_id) / "export" / "leak").symlink_to(secret)

    listed = api.get(f"/api/v1/experiments/{experiment_id}/artifacts/").json()
    assert [a["name"] for a in listed] == ["model", "checkpoints", "logs"]
    archives = {}
    for artifact in listed:
        answer = api.get(artifact["url"])
        assert answer.status_code == 200, artifact
        assert answer["Content-Type"] == "application/zip"
        assert answer["Content-Disposition"] == f'attachment; filename="{artifact["filename"]}"'
        body = b"".join(answer.streaming_content)
        assert len(body) == int(answer["Content-Length"]) == artifact["size_bytes"]
        archives[artifact["name"]] = zipfile.ZipFile(io.BytesIO(body))
        assert archives[artifact["name"]].testzip() is None
        assert len(archives[artifact["name"]].namelist()) == artifact["files"]

    model_files = archives["model"].namelist()
    assert "model/saved_model.pb" in model_files and "model/leak" not in model_files
    checkpoints = archives["checkpoints"].namelist()
    index = archives["checkpoints"].read("checkpoints/checkpoint").decode()
    latest = index.split('model_checkpoint_path: "')[1].split('"')[0]  # ckpt-<steps done>
    assert {f"checkpoints/{latest}.index", f"checkpoints/progress-{latest[5:]}.json"} <= set(
        checkpoints)
    assert any(name.startswith("best/epoch-") for name in checkpoints)
    progress = json.loads(archives["checkpoints"].read(f"checkpoints/progress-{latest[5:]}.json"))
    assert progress["epochs_completed"] == 2 and progress["epoch_steps"] == 0
    assert "attempts/001/worker-0.log" in archives["logs"].namelist()

    archives["model"].extractall(tmp_path)
    loaded = subprocess.run([sys.executable, "-c", LOAD_AND_PREDICT, str(tmp_path / "model")],
                            capture_output=True, text=True, timeout=120)
    assert loaded.stdout.strip() == "(3, 10)", loaded.stderr[-2000:]

    page = Client()
    page.force_login(owner)
    html = page.get(f"/experiments/{experiment_id}/").content.decode()
    section = html.split('id="artifacts"', 1)[1].split("</section>", 1)[0]
    assert f'href="/experiments/{experiment_id}/artifacts/model/" download' in section
    downloaded = page.get(f"/experiments/{experiment_id}/artifacts/logs/")
    assert downloaded.status_code == 200
    assert len(b"".join(downloaded.streaming_content)) == int(downloaded["Content-Length"])

    stranger = APIClient()
    stranger.force_authenticate(UserFactory())
    for url in (f"/api/v1/experiments/{experiment_id}/artifacts/",
                f"/api/v1/experiments/{experiment_id}/artifacts/model/"):
        assert stranger.get(url).status_code == 404
    other = Client()
    other.force_login(UserFactory())
    assert other.get(f"/experiments/{experiment_id}/artifacts/model/").status_code == 404
    unknown = api.get(f"/api/v1/experiments/{experiment_id}/artifacts/weights/")
    assert unknown.status_code == 404 and "there are model, checkpoints, logs" in (
        unknown.json()["error"])


def test_an_unfinished_experiment_has_nothing_to_download_yet() -> None:
    experiment = ExperimentFactory()
    api = APIClient()
    api.force_authenticate(experiment.owner)
    assert api.get(f"/api/v1/experiments/{experiment.pk}/artifacts/").json() == []
    early = api.get(f"/api/v1/experiments/{experiment.pk}/artifacts/model/")
    assert early.status_code == 409, early.content
    assert early.json()["error"] == "Artifacts can be downloaded once the experiment has finished."
