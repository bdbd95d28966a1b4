"""30 experiments of random sizes submitted at once, two scheduler processes, three real worker
nodes (Celery workers with declared slots) running every trial for real: the `pi` diagnostic job,
a few seconds of TensorFlow per task, on one to four devices and across nodes.

30 keeps the queue four times the cluster's eight slots, with seven sizes, eight gangs (one with
a parameter server, two that cannot fit on one node) and every priority. 50 only added more of
the same: 64 task processes instead of 39, each mostly TensorFlow's start, and on two cores the
test's time grows with them.

Throughout, the database never shows a device allocated twice, a team over its GPU quota, or a
gang that holds part of its devices; at the end every experiment has completed exactly once and
nothing holds a device.
"""

import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db.models import Count, Q

from tests import live
from tests.factories import ExperimentFactory, TeamFactory, UserFactory
from tests.tfplatform.experiments.services.invariants import check_invariants
from tfplatform.cluster.models import Allocation, Node
from tfplatform.experiments.models import Experiment

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SEED = 20261121
EXPERIMENTS = 30
# (name, address, GPU slots); every node also has one CPU slot.
NODES = (("a", "127.0.0.1", 2), ("b", "127.0.0.2", 2), ("c", "127.0.0.3", 1))
TEAM_QUOTAS = (2, 3)
PI = {"pi_samples_per_replica": 20_000, "pi_rounds": 2}
TIMEOUT_SECONDS = 900


@pytest.fixture
def worker_nodes(tmp_path: Path) -> Iterator[list[Path]]:
    work = str(tmp_path / "work")  # shared storage, as the compose work volume is
    processes, logs = [], []
    for name, address, gpus in NODES:
        log = tmp_path / f"node-{name}.log"
        args = [*live.WORKER_ARGS, "--node", f"{name}-{tmp_path.name[-6:]}", "--address", address]
        # Only the two scheduler loops schedule here: a node consuming the wake-ups that ended
        # trials send would take nearly every pass on a fast machine, leaving the loops (the
        # thing raced here) with only the first.
        args += ["--gpu-slots", str(gpus), "--cpu-slots", "1", "--no-scheduler-queue"]
        processes.append(live.start(args, env=live.child_env(PLATFORM_WORK_DIR=work), log=log))
        logs.append(log)
    live.wait_for(
        lambda: Node.objects.count() == len(NODES), timeout=90, what="3 nodes", log=logs[0]
    )
    yield logs
    live.stop_all(processes)


def submit_random(*, rng: random.Random) -> list[Experiment]:
    owners = [UserFactory(team=TeamFactory(gpu_quota=quota)) for quota in TEAM_QUOTAS]
    owners.append(UserFactory())  # no team: a quota of their own
    experiments = []
    for _ in range(EXPERIMENTS):
        owner = rng.choice(owners)
        gpus = rng.choice((0, 0, 1, 1, 2))
        workers = rng.choice((1, 1, 1, 2))
        quota = owner.team.gpu_quota if owner.team else settings.PLATFORM.user_gpu_quota
        while workers > 1 and workers * gpus > quota:
            workers -= 1  # every job must fit its team's quota, or it could never start
        parameter_servers = 1 if workers > 1 and rng.random() < 0.3 else 0
        experiments.append(
            ExperimentFactory(
                owner=owner,
                model="pi",
                dataset="",
                hyperparameters=dict(PI),
                workers=workers,
                gpus_per_worker=gpus,
                parameter_servers=parameter_servers,
                priority=rng.choice((0, 0, 1, 5)),
            )
        )
    return experiments


def test_thirty_random_experiments_on_real_nodes_with_two_schedulers(
    worker_nodes: list[Path], tmp_path: Path
) -> None:
    experiments = submit_random(rng=random.Random(SEED))
    sizes = Experiment.objects.values_list("workers", "gpus_per_worker", "parameter_servers")
    assert len(set(sizes)) >= 5, "random sizes"
    logs = [tmp_path / "scheduler-a.log", tmp_path / "scheduler-b.log"]
    # Different intervals, so neither loop settles into always running just after the other.
    schedulers = [
        live.start(
            [sys.executable, "manage.py", "scheduler", "--interval", interval],
            env=live.child_env(PLATFORM_LOG_LEVEL="INFO"),
            log=log,
        )
        for interval, log in zip(("0.2", "0.35"), logs, strict=True)
    ]
    checks = 0
    try:
        deadline = time.monotonic() + TIMEOUT_SECONDS
        finished = Q(state__in=("completed", "failed", "canceled"))
        while Experiment.objects.filter(finished).count() < EXPERIMENTS:
            assert time.monotonic() < deadline, worker_nodes[0].read_text()[-3000:]
            check_invariants()
            checks += 1
            time.sleep(0.2)
        assert all(process.poll() is None for process in schedulers), "a scheduler died"
    finally:
        codes = [live.stop(process) for process in schedulers]
    check_invariants()
    text = "\n".join(log.read_text() for log in logs)
    assert codes == [0, 0] and "Traceback" not in text, text[-4000:]
    for log in logs:
        assert "Scheduled" in log.read_text(), f"{log.name} never scheduled anything"
    assert checks >= 10  # the invariants held all along, not only at the end
    failed = Experiment.objects.exclude(state="completed").values_list("id", "state", "error")
    assert list(failed) == []
    once = Experiment.objects.annotate(
        done=Count("trials", filter=Q(trials__state="completed"))
    ).values_list("done", flat=True)
    assert set(once) == {1}
    assert not Allocation.objects.filter(released_at__isnull=True).exists()
    for experiment in Experiment.objects.filter(pk__in=[e.pk for e in experiments]):
        metrics = experiment.results["final_metrics"]
        # On CPU hosts a multi-worker strategy has one replica per worker process; only one
        # process spreads over its emulated GPUs (TF adds only real GPUs as worker replicas).
        gpus = max(experiment.gpus_per_worker, 1)
        replicas = gpus if experiment.workers == 1 else experiment.workers
        assert metrics["samples"] == PI["pi_samples_per_replica"] * PI["pi_rounds"] * replicas
        assert metrics["abs_error"] < 0.1  # about 8 standard errors at the smallest size
    # Gangs really spread over nodes, and the whole cluster was used.
    nodes_per_trial = Allocation.objects.values("holder_id").annotate(
        n=Count("node", distinct=True))
    assert any(row["n"] > 1 for row in nodes_per_trial)
    assert Allocation.objects.values("node").distinct().count() == len(NODES)
