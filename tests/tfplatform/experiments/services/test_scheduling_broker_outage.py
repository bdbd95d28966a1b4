"""The broker stops mid-training and comes back: a Redis of the test's own, keeping nothing on
disk, comes back empty; a RabbitMQ of the test's own comes back with its durable queues. Either
way the running trial keeps training and recording, an experiment scheduled meanwhile is
dispatched once the broker is back, nothing runs twice and nothing is lost."""

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from tests import live
from tests.factories import UserFactory
from tests.paced_model import paced_upload
from tfplatform.cluster.models import Allocation, Node
from tfplatform.experiments.models import Experiment, Trial

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FINISHED = ("completed", "failed", "canceled")


@dataclass
class Platform:
    """A worker node and a scheduler on the test's own broker, and a signed-in client."""

    folder: Path
    kind: str = "redis"
    port: int = field(default_factory=live.free_port)
    broker: "subprocess.Popen[bytes] | None" = None
    client: APIClient = field(default_factory=APIClient)

    @property
    def log(self) -> Path:
        return self.folder / "worker.log"

    @property
    def broker_url(self) -> str:
        if self.kind == "rabbitmq":
            return f"amqp://guest:guest@127.0.0.1:{self.port}//"
        return f"redis://127.0.0.1:{self.port}/0"

    def broker_start(self) -> None:
        log = self.folder / f"{self.kind}.log"
        self.broker = (
            live.rabbitmq_start(port=self.port, folder=self.folder / "rabbitmq", log=log)
            if self.kind == "rabbitmq" else live.redis_start(port=self.port, log=log))

    def broker_stop(self) -> None:
        if self.broker is not None:
            live.stop(self.broker)
            self.broker = None

    def submit(self, *, name: str, epochs: int, paced: bool = False) -> int:
        """`paced`: training that takes its time without using CPU (tests/paced_model.py)."""
        model = {"model": "upload", "model_file": paced_upload()} if paced else {"model": "mlp"}
        answer = self.client.post("/api/v1/experiments/", {
            "name": name, "dataset": "digits", **model,
            "hyperparameters": json.dumps({"epochs": epochs}),
        }, format="multipart")
        assert answer.status_code == 201, answer.content
        return int(answer.json()["id"])

    def wait_finished(self, experiment_id: int) -> Experiment:
        live.wait_for(lambda: live.experiment_state(experiment_id) in FINISHED, timeout=300,
                      what=f"experiment {experiment_id} to finish", log=self.log)
        experiment = Experiment.objects.get(pk=experiment_id)
        assert experiment.state == "completed", (experiment.error, self.log.read_text()[-3000:])
        return experiment


@contextmanager
def platform_on_own_broker(*, folder: Path, cpu_slots: int = 1, kind: str = "redis",
                           **env: str) -> Iterator[Platform]:
    platform = Platform(folder=folder, kind=kind)
    platform.broker_start()
    env |= {"CELERY_BROKER_URL": platform.broker_url,
            "PLATFORM_WORK_DIR": str(folder / "work")}
    node = f"broker-{folder.name[-8:]}"
    worker = live.worker_start(node=node, log=platform.log, cpu_slots=cpu_slots, **env)
    scheduler = live.start([sys.executable, "manage.py", "scheduler", "--interval", "0.5"],
                           env=live.child_env(**env), log=folder / "scheduler.log")
    platform.client.force_authenticate(UserFactory())
    try:
        live.wait_for(lambda: Node.objects.filter(hostname=node).exists(), timeout=60,
                      what="node registration", log=platform.log)
        yield platform
    finally:
        live.stop_all([scheduler, worker])
        platform.broker_stop()


@pytest.mark.parametrize("kind", ["redis", "rabbitmq"])
def test_a_broker_restart_mid_training_loses_no_trial_and_runs_none_twice(
    tmp_path: Path, kind: str
) -> None:
    with platform_on_own_broker(folder=tmp_path, cpu_slots=2, kind=kind,
                                PLATFORM_DISPATCH_RETRY_SECONDS="10") as platform:
        client, log = platform.client, platform.log
        # Long enough to outlive the outage (two epochs before it, two in it, the broker's
        # restart) by a few epochs; more only add waiting.
        first = platform.submit(name="through the outage", epochs=9, paced=True)
        live.wait_for(lambda: len(live.metric_epochs(client, first)) >= 2, timeout=180,
                      what="two epochs before the outage", log=log)

        platform.broker_stop()
        before = len(live.metric_epochs(client, first))
        second = platform.submit(name="scheduled while away", epochs=2)
        live.wait_for(lambda: Trial.objects.filter(experiment_id=second).exists(), timeout=30,
                      what="the second experiment to be placed without a broker", log=log)
        live.wait_for(lambda: len(live.metric_epochs(client, first)) >= before + 2, timeout=120,
                      what="training to go on without a broker", log=log)
        [waiting] = Trial.objects.filter(experiment_id=second)
        assert (waiting.state, waiting.dispatched_at) == ("pending", None)

        platform.broker_start()  # back: Redis empty, RabbitMQ with what it kept
        finished = [platform.wait_finished(first), platform.wait_finished(second)]

    for experiment, epochs in zip(finished, (9, 2), strict=True):
        [trial] = experiment.trials.all()  # ran once: no restart, no second trial
        assert trial.state == "completed" and trial.dispatched_at is not None
        assert live.metric_epochs(client, experiment.pk) == list(range(1, epochs + 1))
    assert not Allocation.objects.filter(released_at__isnull=True).exists()


def test_a_trial_longer_than_the_visibility_timeout_runs_once_and_is_never_sent_again(
    tmp_path: Path,
) -> None:
    import redis

    with platform_on_own_broker(folder=tmp_path, PLATFORM_BROKER_VISIBILITY_TIMEOUT="1",
                                PLATFORM_BROKER_RESTORE_SECONDS="1") as platform:
        # Several seconds of training: the node looks for overdue messages every second, so a
        # message still unacknowledged would be sent again a few times over meanwhile.
        experiment_id = platform.submit(name="outlives the timeout", epochs=6, paced=True)
        live.wait_for(lambda: len(live.metric_epochs(platform.client, experiment_id)) >= 1,
                      timeout=180, what="the first epoch", log=platform.log)
        # Taken and acknowledged: the broker holds no unacknowledged copy while it trains.
        held = redis.Redis.from_url(platform.broker_url).hvals("unacked")
        assert not [message for message in held if b"experiments.trial_run" in message], held
        experiment = platform.wait_finished(experiment_id)
    [trial] = experiment.trials.all()
    assert trial.state == "completed"
    assert live.metric_epochs(platform.client, experiment_id) == list(range(1, 7))
    # Acknowledged when the node took it: the broker had nothing to deliver again.
    received = [line for line in platform.log.read_text().splitlines()
                if "experiments.trial_run[" in line and " received" in line]
    assert len(received) == 1, received
