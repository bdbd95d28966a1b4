"""The node's work disk (a small tmpfs of the test's own) fills up while a trial trains: the trial
fails with a "no space" reason that blames the node, the experiment waits in the queue saying
which node is out of space instead of burning its restarts there, the last checkpoint is whole,
and once space is freed the trial resumes from it: every epoch once, nothing held afterwards."""

import json
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests import live
from tests.disks import disk_fill, disk_free, tmpfs_mounted
from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.cluster.models import Allocation, Node
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.execution import experiment_work_dir

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EPOCHS = 6
MIN_FREE_MB = 8


def test_a_full_work_disk_parks_the_trial_until_space_is_freed_then_it_resumes(
    tmp_path: Path, settings: Any, platform_settings_override: PlatformSettingsOverride
) -> None:
    with tmpfs_mounted(path=tmp_path / "disk", megabytes=64) as disk:
        work, runs = disk / "work", disk / "runs"
        platform_settings_override(work_dir=work, run_dir=runs, work_disk_min_free_mb=MIN_FREE_MB)
        name, log = f"disk-{tmp_path.name[-10:]}", tmp_path / "worker.log"
        worker = live.worker_start(
            node=name, log=log, PLATFORM_WORK_DIR=str(work), PLATFORM_RUN_DIR=str(runs),
            PLATFORM_WORK_DISK_MIN_FREE_MB=str(MIN_FREE_MB), PLATFORM_HEARTBEAT_SECONDS="1")
        try:
            live.wait_for(lambda: Node.objects.filter(hostname=name).exists(), timeout=60,
                          what="node registration", log=log)
            client = APIClient()
            client.force_authenticate(UserFactory())
            answer = client.post("/api/v1/experiments/", {
                "name": "fills the disk", "model": "mlp", "dataset": "digits",
                # Small batches: an epoch lasts about a second, so the disk fills mid-training.
                "hyperparameters": {"epochs": EPOCHS, "batch_size": 4}}, format="json")
            assert answer.status_code == 201, answer.content
            experiment_id = answer.json()["id"]
            live.wait_for(lambda: len(live.metric_epochs(client, experiment_id)) >= 2,
                          timeout=180, what="two epochs", log=log)

            disk_fill(path=disk)
            live.wait_for(lambda: "Out of disk space" in _pending_reason(experiment_id),
                          timeout=120, what="the experiment to wait for disk space", log=log)
            parked = client.get(f"/api/v1/experiments/{experiment_id}/").json()
            checkpoints = experiment_work_dir(experiment_id=experiment_id) / "checkpoints"
            index = (checkpoints / "checkpoint").read_text()
            saved = int(index.split('model_checkpoint_path: "ckpt-')[1].split('"')[0])
            progress = json.loads((checkpoints / f"progress-{saved}.json").read_text())
            # Anything of a later save than the registered one (named by its step count).
            leftovers = [p.name for p in checkpoints.iterdir()
                         if p.name.startswith(("ckpt-", "progress-"))
                         and int(p.name.split("-")[1].split(".")[0]) > saved]
            node = Node.objects.get(hostname=name)

            disk_free(path=disk)
            state = live.experiment_wait_finished(experiment_id, timeout=240, log=log)
            detail = client.get(f"/api/v1/experiments/{experiment_id}/").json()
            epochs = live.metric_epochs(client, experiment_id)
        finally:
            live.stop(worker)

    worker_log = log.read_text()
    assert parked["state"] == "queued", parked
    assert f"{name} (" in parked["pending_reason"], parked["pending_reason"]
    [failed] = [t for t in parked["trials"] if t["state"] == "failed"]
    assert "no space left on the node's work disk" in failed["exit_reason"]
    assert "not the trial's" in failed["exit_reason"]
    assert progress["epochs_completed"] >= 2 and progress["epoch_steps"] == 0
    assert leftovers == []
    assert node.work_disk_free_bytes is not None
    assert node.work_disk_free_bytes < MIN_FREE_MB * 2**20

    assert state == "completed", (detail.get("error"), worker_log[-3000:])
    assert [t["state"] for t in detail["trials"]] == ["failed", "completed"]
    assert detail["results"]["resumed_from_epoch"] == progress["epochs_completed"]
    assert epochs == list(range(1, EPOCHS + 1))
    assert not Allocation.objects.filter(released_at__isnull=True).exists()


def _pending_reason(experiment_id: int) -> str:
    return str(Experiment.objects.values_list("pending_reason", flat=True).get(pk=experiment_id))
