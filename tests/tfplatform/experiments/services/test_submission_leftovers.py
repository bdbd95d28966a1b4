"""A web process killed between storing an upload and committing its experiment leaves the file
with nothing naming it; the scheduler's sweep removes it once it is old enough, and files that
experiments name are never touched."""

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from rest_framework.test import APIClient

from tests import live
from tests.factories import UserFactory
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.submission import uploads_leftovers_remove

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MODULE = b"""
import tf_keras as keras

def build_model(hparams):
    return keras.Sequential([keras.Input(shape=hparams["input_shape"]),
                             keras.layers.Dense(hparams["num_classes"], activation="softmax")])
"""
# The platform's own submission in a process of its own, which dies before its transaction
# commits, as a web worker killed mid-request does.
KILLED_BEFORE_COMMIT = """
import os
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from tfplatform.accounts.models import User
from tfplatform.experiments.services.submission import ExperimentRequest, experiment_create

with transaction.atomic():
    experiment = experiment_create(
        owner=User.objects.get(username=os.environ["OWNER"]),
        request=ExperimentRequest(name="killed", model="upload", dataset="digits",
                                  model_file=SimpleUploadedFile("mine.py", {module!r})),
    )
    print(experiment.model_file.name, flush=True)
    os._exit(9)
"""


def test_an_upload_whose_experiment_never_committed_is_swept_and_named_ones_stay(
    tmp_path: Path, settings: Any
) -> None:
    media = tmp_path / "uploads"  # this test's alone: the suite's other uploads are not named
    settings.MEDIA_ROOT = media
    owner = UserFactory()
    killed = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", KILLED_BEFORE_COMMIT.format(module=MODULE)],
        cwd=live.ROOT, env=live.child_env(OWNER=owner.username, PLATFORM_MEDIA_ROOT=str(media)),
        capture_output=True, text=True, timeout=300,
    )
    assert killed.returncode == 9, killed.stderr[-2000:]
    stored = killed.stdout.strip().splitlines()[-1]
    assert default_storage.exists(stored) and not Experiment.objects.exists()

    client = APIClient()
    client.force_authenticate(owner)
    answer = client.post("/api/v1/experiments/", {
        "name": "retried", "model": "upload", "dataset": "digits",
        "model_file": _upload(tmp_path / "mine.py"),
    }, format="multipart")
    assert answer.status_code == 201, answer.content
    named = Experiment.objects.get(pk=answer.json()["id"]).model_file.name

    assert uploads_leftovers_remove() == []  # seconds old: perhaps a submission under way
    assert uploads_leftovers_remove(older_than=0) == [stored]
    assert not default_storage.exists(stored)
    assert default_storage.exists(named) and default_storage.open(named).read() == MODULE


def _upload(path: Path) -> object:
    path.write_bytes(MODULE)
    return path.open("rb")


@pytest.mark.django_db
def test_a_file_another_schedulers_sweep_removed_first_is_skipped(
    tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two schedulers sweep at once: one lists a leftover the other then removes."""
    settings.MEDIA_ROOT = tmp_path / "uploads"
    gone = default_storage.save("models/2026/11/gone-model.py", ContentFile(MODULE))
    kept = default_storage.save("models/2026/11/kept-model.py", ContentFile(MODULE))
    modified_time = default_storage.get_modified_time

    def removed_by_the_other_sweep(name: str) -> Any:
        if name == gone:
            default_storage.delete(name)
        return modified_time(name)

    monkeypatch.setattr(default_storage, "get_modified_time", removed_by_the_other_sweep)
    assert uploads_leftovers_remove(older_than=0) == [kept]
    assert not default_storage.exists(gone) and not default_storage.exists(kept)
