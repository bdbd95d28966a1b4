"""An elastic experiment shrunk by a higher-priority submission and grown back when it ends, on a
real node with 4 emulated GPUs, trains as the same experiment kept at 4 GPUs does.

4 → 2 → 4: the scheduler stops it mid-training to shrink it (its checkpoint is taken at the step
it stopped at), it resumes at the exact batch on 2 GPUs with 2 gradient-accumulation steps, and
once the urgent job ends it is grown back. Same seed, same global batch, same batches in the same
order: the per-epoch validation losses agree with the fixed run's within float tolerance. (That
each epoch sees every example once is checked on the pipeline itself: tests/training/data.)
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests import live
from tests.factories import TeamFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.cluster.models import Node
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services.scheduling import scheduler_pass

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Global batches of 16 (4 per replica at 4 GPUs): 84 steps an epoch, 12 epochs, so that the
# urgent job (one short epoch) ends, and the elastic one is grown back, well before it would. A
# learning rate that keeps training well conditioned: at 0.002 on batches of 4, rounding (sums
# taken in another order at 2 replicas) grows into 10 % apart by the third epoch, as it would
# between any two orders of summation. No dropout: its masks are drawn per replica.
HYPERPARAMETERS = {"epochs": 12, "batch_size": 4, "learning_rate": 0.0005, "seed": 7,
                   "dropout": 0.0}
URGENT = {"epochs": 1, "batch_size": 64}
# The runs differ only in the order sums are taken: measured within 4e-7 (relative) over 12
# epochs at 2 GPUs throughout.
RTOL = 1e-4
# A resized trial runs this long before it is grown again.
GROW_AFTER_SECONDS = 3


@pytest.fixture
def four_gpu_node(tmp_path: Path, platform_settings_override: PlatformSettingsOverride
                  ) -> Iterator[Path]:
    work = tmp_path / "work"
    platform_settings_override(work_dir=work, elastic_grow_after_seconds=GROW_AFTER_SECONDS)
    log = tmp_path / "node.log"
    process = live.worker_start(node=f"elastic-{tmp_path.name[-6:]}", log=log, gpu_slots=4,
                                PLATFORM_WORK_DIR=str(work),
                                PLATFORM_ELASTIC_GROW_AFTER_SECONDS=str(GROW_AFTER_SECONDS))
    live.wait_for(lambda: Node.objects.exists(), timeout=60, what="the node", log=log)
    yield log
    live.stop(process)


def submit(client: APIClient, *, priority: int = 0, hyperparameters: dict[str, Any] | None = None,
           **resources: Any) -> int:
    response = client.post("/api/v1/experiments/", {
        "name": "elastic", "model": "mlp", "dataset": "digits", "priority": priority,
        "hyperparameters": hyperparameters or HYPERPARAMETERS,
        "resources": {"workers": 1, **resources},
    }, format="json")
    assert response.status_code == 201, response.json()
    return int(response.json()["id"])


def val_losses(client: APIClient, experiment_id: int) -> list[float]:
    rows = client.get(f"/api/v1/experiments/{experiment_id}/metrics/?name=val_loss").json()
    return [row["value"] for row in sorted(rows, key=lambda row: row["epoch"])]


def trial_training(experiment_id: int, restart_count: int) -> bool:
    """Its scheduler passes run here too, so nothing waits for the node's next wake-up."""
    scheduler_pass()
    return Trial.objects.filter(experiment_id=experiment_id, restart_count=restart_count,
                                first_step_at__isnull=False).exists()


def test_shrunk_for_a_higher_priority_job_and_grown_back_it_trains_as_at_full_size(
    four_gpu_node: Path,
) -> None:
    log = four_gpu_node
    client = APIClient()
    client.force_authenticate(UserFactory(team=TeamFactory(gpu_quota=8)))
    fixed = submit(client, gpus_per_worker=4)
    assert live.experiment_wait_finished(fixed, timeout=600, log=log) == "completed"

    elastic = submit(client, gpus_per_worker=4, min_gpus_per_worker=1)
    live.wait_for(lambda: trial_training(elastic, 0), timeout=300, what="training at 4", log=log)
    urgent = submit(client, gpus_per_worker=2, priority=5, hyperparameters=URGENT)
    live.wait_for(lambda: trial_training(elastic, 1), timeout=300, what="training at 2", log=log)
    live.wait_for(lambda: trial_training(elastic, 2), timeout=600, what="training at 4 again",
                  log=log)
    assert live.experiment_wait_finished(elastic, timeout=600, log=log) == "completed"
    assert live.experiment_state(urgent) == "completed"

    trials = list(Trial.objects.filter(experiment_id=elastic).order_by("restart_count"))
    assert [(t.gpus_per_worker, t.stop_reason) for t in trials] == [
        (4, "resized"), (2, "resized"), (4, "")]
    assert trials[0].stop_detail == f"shrunk from 4 GPU for experiment {urgent} (priority 5)"
    assert trials[1].stop_detail == "grown from 2 GPU to 4 GPU onto idle devices"
    # At 2 GPUs the global batch stayed 16: 2 replicas × 2 accumulation steps of 4.
    assert "accumulation_steps=2" in trials[1].logs and "global_batch_size=16" in trials[1].logs
    assert "phase=resumed" in trials[1].logs and "phase=resumed" in trials[2].logs
    shown = client.get(f"/api/v1/experiments/{elastic}/").json()
    assert shown["size"] == {"workers": 1, "gpus_per_worker": 4}
    assert [t["stop_detail"] for t in shown["trials"]][:2] == [
        trials[0].stop_detail, trials[1].stop_detail]

    expected, got = val_losses(client, fixed), val_losses(client, elastic)
    assert len(got) == len(expected) == HYPERPARAMETERS["epochs"]
    assert got == pytest.approx(expected, rel=RTOL)
    results = Experiment.objects.get(pk=elastic).results
    assert results["epochs_completed"] == HYPERPARAMETERS["epochs"]
