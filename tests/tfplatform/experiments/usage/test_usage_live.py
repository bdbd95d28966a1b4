"""Showback against real trials: a worker node with two emulated GPU slots and a CPU slot, a
scheduler process, and the `pi` job on 2 GPUs, 1 GPU and a CPU slot. The usage report must
equal devices × seconds of the allocations the run made, and agree with the trials' own
start and finish times within the scheduler's and heartbeat's granularity."""

import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db.models import Q
from rest_framework.test import APIClient

from tests import live
from tests.factories import ExperimentFactory, TeamFactory, UserFactory
from tfplatform.cluster.models import Allocation, Node
from tfplatform.experiments.models import Experiment

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PI = {"pi_samples_per_replica": 20_000, "pi_rounds": 2}
# A trial's started_at/finished_at and its allocations' started_at/released_at are stamped
# by different steps of the same run (claim, first report, outcome, release): seconds apart.
GRANULARITY_SECONDS = 5.0


@pytest.fixture
def node_and_scheduler(tmp_path: Path) -> Iterator[Path]:
    log = tmp_path / "node.log"
    name = f"showback-{tmp_path.name[-6:]}"
    env = live.child_env(PLATFORM_WORK_DIR=str(tmp_path / "work"))
    worker = live.start([*live.WORKER_ARGS, "--node", name, "--gpu-slots", "2",
                         "--cpu-slots", "1"], env=env, log=log)
    scheduler = live.start([sys.executable, "manage.py", "scheduler", "--interval", "0.5"],
                           env=live.child_env(), log=tmp_path / "scheduler.log")
    try:
        live.wait_for(lambda: Node.objects.filter(hostname=name).exists(), timeout=90,
                      what="node registration", log=log)
        yield log
    finally:
        live.stop(scheduler)
        live.stop(worker)


def usage(user: object, params: str) -> dict:
    client = APIClient()
    client.force_authenticate(user)
    response = client.get(f"/api/v1/usage/?{params}")
    assert response.status_code == 200, response.content
    return response.json()


def test_showback_matches_the_allocations_real_trials_made(node_and_scheduler: Path) -> None:
    vision = TeamFactory(name="vision", gpu_quota=4)
    ana = UserFactory(username="ana", team=vision)
    bea = UserFactory(username="bea")
    runs = [
        ExperimentFactory(owner=ana, name="two-gpus", model="pi", dataset="",
                          hyperparameters=dict(PI), gpus_per_worker=2),
        ExperimentFactory(owner=ana, name="one-gpu", model="pi", dataset="",
                          hyperparameters=dict(PI), gpus_per_worker=1),
        ExperimentFactory(owner=bea, name="cpu-slot", model="pi", dataset="",
                          hyperparameters=dict(PI), gpus_per_worker=0),
    ]
    finished = Q(state__in=("completed", "failed", "canceled"))
    live.wait_for(lambda: Experiment.objects.filter(finished).count() == len(runs),
                  timeout=600, what="the three experiments to finish", log=node_and_scheduler)
    states = dict(Experiment.objects.values_list("name", "state"))
    assert set(states.values()) == {"completed"}, (states, node_and_scheduler.read_text()[-3000:])
    assert not Allocation.objects.filter(released_at__isnull=True).exists()

    today = datetime.now(UTC).date()
    window = f"from={today - timedelta(days=1)}&to={today}"  # a run may span UTC midnight
    staff = UserFactory(is_staff=True)
    report = usage(staff, f"{window}&group_by=experiment")
    rows = {row["experiment_name"]: row for row in report["results"]}
    assert set(rows) == {"two-gpus", "one-gpu", "cpu-slot"}
    for experiment in runs:
        allocations = list(Allocation.objects.filter(trial__experiment=experiment)
                           .select_related("device"))
        gpus = [a for a in allocations if a.device and a.device.kind == "gpu"]
        cpus = [a for a in allocations if a.device and a.device.kind == "cpu"]
        assert len(gpus) == experiment.gpus_per_worker and len(cpus) == (not gpus)
        held = {kind: sum((a.released_at - a.started_at).total_seconds() for a in group)
                for kind, group in (("gpu", gpus), ("cpu", cpus))}
        row = rows[experiment.name]
        # Exactly the allocation records: devices × seconds held.
        assert row["gpu_seconds"] == pytest.approx(held["gpu"], abs=0.01)
        assert row["cpu_slot_seconds"] == pytest.approx(held["cpu"], abs=0.01)
        assert row["gpu_hours"] == pytest.approx(held["gpu"] / 3600, abs=1e-5)
        # And the trial's own clock: its devices × its run time, within the granularity.
        trial = experiment.trials.get()
        ran = (trial.finished_at - trial.started_at).total_seconds()
        devices = max(experiment.gpus_per_worker, 1)
        key = "gpu_seconds" if experiment.gpus_per_worker else "cpu_slot_seconds"
        assert ran > 0 and row[key] > 0
        assert abs(row[key] - devices * ran) <= devices * GRANULARITY_SECONDS, (row, ran)
        assert row["gpu_utilization_percent"] is None  # emulated slots: not measured
        assert row["running"] is False

    two, one = rows["two-gpus"]["gpu_seconds"], rows["one-gpu"]["gpu_seconds"]
    by_user = {row["user"]: row for row in usage(staff, f"{window}&group_by=user")["results"]}
    assert by_user["ana"]["gpu_seconds"] == pytest.approx(two + one, abs=0.01)
    assert by_user["bea"]["gpu_seconds"] == 0
    assert by_user["bea"]["cpu_slot_seconds"] == pytest.approx(
        rows["cpu-slot"]["cpu_slot_seconds"], abs=0.01)
    by_day = usage(staff, f"{window}&group_by=day")
    assert by_day["totals"]["gpu_seconds"] == pytest.approx(two + one, abs=0.01)
    # Each user sees only their own (and their team's) usage.
    assert [r["user"] for r in usage(bea, window)["results"]] == ["bea"]
    assert [r["user"] for r in usage(ana, window)["results"]] == ["ana"]
