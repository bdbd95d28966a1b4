"""Two real scheduler processes on one database under heavy churn: no device handed out twice,
quotas and gangs hold, while trials start, end and are preempted through the services a worker
node uses.

This process plays every worker node, so trials can start and end many times a second; the same
invariants with real worker nodes running real trials are in test_scheduler_real_workers.py.
"""

import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from tests import live
from tests.factories import DeviceFactory, ExperimentFactory, NodeFactory, TeamFactory, UserFactory
from tests.tfplatform.experiments.services.invariants import LIVE, check_invariants
from tfplatform.accounts.models import User
from tfplatform.cluster.models import Allocation, Node
from tfplatform.cluster.placement import gang_place
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services import scheduling
from tfplatform.experiments.services.execution import trial_outcome_record
from tfplatform.experiments.services.submission import experiment_cancel
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.experiments.services.trials import trial_start
from training.spec import TrialOutcome

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SEED = 7305
EXPERIMENTS = 50
FIRST_WAVE = 38  # low priority; the rest arrive urgent once the cluster is busy
NODE_GPUS = (4, 4, 2, 2, 1, 0)
CPU_SLOTS = 2
TEAM_QUOTAS = (3, 4, 6)
TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Job:
    owner: User
    workers: int
    gpus_per_worker: int
    parameter_servers: int
    seconds: float


def declare_cluster() -> None:
    for gpus in NODE_GPUS:
        node = NodeFactory()
        for index in range(gpus):
            DeviceFactory(node=node, kind="gpu", index=index)
        for index in range(CPU_SLOTS):
            DeviceFactory(node=node, kind="cpu", index=index)


def random_jobs(*, rng: random.Random) -> list[Job]:
    owners = [UserFactory(team=TeamFactory(gpu_quota=quota)) for quota in TEAM_QUOTAS]
    owners.append(UserFactory())  # no team: a quota of their own
    jobs = []
    for _ in range(EXPERIMENTS):
        owner = rng.choice(owners)
        gpus = rng.choice((0, 1, 1, 2, 4))
        workers = rng.choice((1, 1, 2, 3))
        quota = owner.team.gpu_quota if owner.team else settings.PLATFORM.user_gpu_quota
        while workers > 1 and workers * gpus > quota:
            workers -= 1  # every job must fit its team's quota, or it could never finish
        gpus = min(gpus, quota)
        parameter_servers = rng.choice((0, 0, 1)) if workers > 1 else 0
        jobs.append(Job(owner, workers, gpus, parameter_servers, rng.uniform(0.2, 1.2)))
    return jobs


def submit(job: Job, *, priority: int) -> Experiment:
    return ExperimentFactory(
        owner=job.owner,
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
        parameter_servers=job.parameter_servers,
        priority=priority,
    )


def cluster_busy() -> bool:
    """Urgent jobs arrive while lower-priority ones hold the devices (or nothing is left)."""
    states = Experiment.objects.values_list("state", flat=True)
    return (
        states.filter(state=Experiment.State.RUNNING).count() >= 4
        or not states.filter(state=Experiment.State.QUEUED).exists()
    )


def play_worker_nodes(*, seconds: dict[int, float]) -> None:
    """One round of what worker nodes do: take up trials, stop preempted ones, finish."""
    now = timezone.now()
    for trial in Trial.objects.filter(state__in=LIVE).select_related("experiment"):
        if trial.stop_reason:
            # The supervisor stopped every process; a preempted trial's experiment requeues.
            end(trial, status="canceled")
        elif trial.state == Trial.State.PENDING:
            trial_start(trial_id=trial.pk)
            experiment_transition(experiment=trial.experiment, to=Experiment.State.RUNNING)
        elif (
            trial.started_at
            and (now - trial.started_at).total_seconds() > seconds[trial.experiment_id]
        ):
            end(trial, status="completed")


def end(trial: Trial, *, status: str) -> None:
    trial_outcome_record(
        trial=trial, outcome=TrialOutcome(status=status, retryable=False, exit_reason=status)
    )


def start_scheduler(*, log: Path) -> subprocess.Popen[bytes]:
    # An in-memory broker: dispatch messages would otherwise pile up for nodes that are
    # only rows in this test's database.
    env = live.child_env(CELERY_BROKER_URL="memory://", PLATFORM_LOG_LEVEL="INFO")
    args = [sys.executable, "manage.py", "scheduler", "--interval", "0.1"]
    return live.start(args, env=env, log=log)


def test_two_schedulers_never_double_allocate(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    declare_cluster()
    jobs = random_jobs(rng=rng)
    seconds: dict[int, float] = {}
    for job in jobs[:FIRST_WAVE]:
        seconds[submit(job, priority=rng.choice((0, 1))).pk] = job.seconds
    logs = [tmp_path / "scheduler-a.log", tmp_path / "scheduler-b.log"]
    schedulers = [start_scheduler(log=log) for log in logs]
    try:
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while Experiment.objects.filter(state=Experiment.State.COMPLETED).count() < EXPERIMENTS:
            assert time.monotonic() < deadline, "timed out: " + logs[0].read_text()[-2000:]
            Node.objects.update(last_heartbeat=timezone.now())
            check_invariants()
            if len(seconds) < EXPERIMENTS and cluster_busy():
                job = jobs[len(seconds)]
                seconds[submit(job, priority=5).pk] = job.seconds
            play_worker_nodes(seconds=seconds)
            check_invariants()
            time.sleep(0.05)
        assert all(process.poll() is None for process in schedulers), "a scheduler died"
    finally:
        codes = [live.stop(process) for process in schedulers]
    text = "\n".join(log.read_text() for log in logs)
    assert codes == [0, 0], (codes, text[-4000:])
    assert "Traceback" not in text, text[-4000:]
    assert not Allocation.objects.filter(released_at__isnull=True).exists()
    assert Trial.objects.filter(stop_reason="preempted", state="canceled").exists()
    for log in logs:
        assert "Scheduled" in log.read_text(), f"{log.name} never scheduled anything"


def test_a_cancel_never_waits_for_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass writes only at its end, in a few statements: a user who cancels an experiment the
    pass has already decided to start is not kept waiting by it, and the pass then leaves the
    canceled one alone (no trial, no devices). On PostgreSQL: SQLite (the embedded `make run`)
    has one writer at a time, and a pass there is one IMMEDIATE transaction, which a cancel
    waits for."""
    if connection.vendor != "postgresql":
        if os.environ.get("CI"):
            pytest.fail("CI runs the suite on PostgreSQL (.ci/run), where this must hold")
        pytest.skip("SQLite has one writer at a time: a cancel waits for the pass there")
    node = NodeFactory()
    for index in range(2):
        DeviceFactory(node=node, kind="gpu", index=index)
    first, second = (ExperimentFactory(gpus_per_worker=1) for _ in range(2))
    deciding, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def place_then_hold(**kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the first experiment is decided; the pass is mid-way
            deciding.set()
            release.wait(60)
        return gang_place(**kwargs)

    monkeypatch.setattr(scheduling, "gang_place", place_then_hold)
    answers: list[int] = []

    def run_pass() -> None:
        try:
            answers.append(scheduling.scheduler_pass())
        finally:
            connection.close()

    passing = threading.Thread(target=run_pass)
    passing.start()
    try:
        assert deciding.wait(60), "the pass never reached its second experiment"
        canceled = experiment_cancel(experiment=first)  # would block here if the pass held it
        assert not release.is_set()  # done while the pass was still deciding
        assert canceled.state == Experiment.State.CANCELED
    finally:
        release.set()
        passing.join(60)
    assert answers == [1]
    assert Experiment.objects.get(pk=first.pk).state == Experiment.State.CANCELED
    assert not Trial.objects.filter(experiment=first).exists()
    assert Experiment.objects.get(pk=second.pk).state == Experiment.State.SCHEDULED
    assert Allocation.objects.filter(released_at__isnull=True).count() == 1
