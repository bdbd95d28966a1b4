"""Capacity that appears wakes a scheduling pass at once: with no scheduler loop running at all,
a node that registers, or is uncordoned, gets the experiment that was waiting for it (the pass
runs on the real worker node, through the real broker)."""

from pathlib import Path

import pytest

from tests import live
from tests.factories import ExperimentFactory
from tfplatform.cluster.dispatch import scheduler_wake_on_commit
from tfplatform.cluster.models import Node
from tfplatform.cluster.services import node_set_state
from tfplatform.experiments.models import Experiment

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PI = {"pi_samples_per_replica": 5_000, "pi_rounds": 1}
NO_NODE = "No worker node is online and accepting work."  # and where it stands in the queue


def test_a_node_that_registers_or_is_uncordoned_gets_the_waiting_experiment(
    tmp_path: Path,
) -> None:
    # Factories write rows without the submission's own wake-up: only the node can start it.
    waiting = ExperimentFactory(model="pi", hyperparameters=PI)
    name = f"wake-{tmp_path.name[-10:]}"
    log = tmp_path / "worker.log"
    process = live.worker_start(node=name, log=log, PLATFORM_WORK_DIR=str(tmp_path / "work"))
    try:
        finished = live.experiment_wait_finished(waiting.pk, timeout=120, log=log,
                                                 what="the first experiment")
        assert finished == Experiment.State.COMPLETED

        node = Node.objects.get(hostname=name)
        node_set_state(node=node, state=Node.State.CORDONED)
        second = ExperimentFactory(model="pi", hyperparameters=PI)
        # A pass through the broker while the only node is cordoned leaves it waiting, and
        # says why; then uncordoning is what starts it.
        scheduler_wake_on_commit()
        live.wait_for(
            lambda: Experiment.objects.get(pk=second.pk).pending_reason.startswith(NO_NODE),
            timeout=60, what="a pass to leave the second experiment waiting", log=log,
        )
        assert Experiment.objects.get(pk=second.pk).state == Experiment.State.QUEUED
        node_set_state(node=node, state=Node.State.READY)
        finished = live.experiment_wait_finished(second.pk, timeout=120, log=log,
                                                 what="the second experiment")
        assert finished == Experiment.State.COMPLETED
    finally:
        live.stop(process)
