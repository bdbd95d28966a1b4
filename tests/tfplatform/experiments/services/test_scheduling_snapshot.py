"""A scheduling pass decides on one snapshot of the database: what others commit while it reads
(a node cordoned, an experiment submitted or canceled) is either all seen or not at all.

Others' writes land at the one moment that mattered, between the pass's read of the cluster
and its read of the queue, made by another connection from a thread."""

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from tests.factories import DeviceFactory, ExperimentFactory, NodeFactory
from tfplatform.cluster.models import Allocation, Node
from tfplatform.cluster.services import node_set_state
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services import scheduling
from tfplatform.experiments.services.submission import experiment_cancel

pytestmark = pytest.mark.django_db(transaction=True)

NO_NODE = "No worker node is online and accepting work."


def committed_by_another(write: Callable[[], Any]) -> None:
    def run() -> None:
        try:
            write()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def after_the_cluster_is_read(monkeypatch: pytest.MonkeyPatch, write: Callable[[], Any]) -> None:
    """`write`, committed once, right after the first pass has read the cluster."""
    read = scheduling._cluster_view
    pending = [write]

    def read_then_write() -> Any:
        view = read()
        while pending:
            committed_by_another(pending.pop())
        return view

    monkeypatch.setattr(scheduling, "_cluster_view", read_then_write)


def cpu_node() -> Node:
    node = NodeFactory()
    DeviceFactory(node=node, kind="cpu", index=0)
    return node


def test_a_node_cordoned_while_the_pass_reads_gets_nothing_submitted_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node = cpu_node()
    submitted: list[Experiment] = []

    def cordon_then_submit() -> None:
        node_set_state(node=Node.objects.get(pk=node.pk), state=Node.State.CORDONED)
        submitted.append(ExperimentFactory())

    after_the_cluster_is_read(monkeypatch, cordon_then_submit)
    # Read committed, the pass saw the node ready and then the experiment submitted after the
    # cordon, and started it there.
    assert scheduling.scheduler_pass() == 0
    assert not Allocation.objects.exists()

    assert scheduling.scheduler_pass() == 0
    waiting = Experiment.objects.get(pk=submitted[0].pk)
    assert waiting.state == Experiment.State.QUEUED
    assert waiting.pending_reason.startswith(NO_NODE)


def test_an_experiment_canceled_while_the_pass_decides_is_decided_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    cpu_node()
    experiment = ExperimentFactory()
    after_the_cluster_is_read(
        monkeypatch, lambda: experiment_cancel(experiment=Experiment.objects.get(pk=experiment.pk)))
    with caplog.at_level(logging.INFO, logger=scheduling.__name__):
        assert scheduling.scheduler_pass() == 0
    # Its snapshot still had it queued; admitting it met the cancel, and the pass decided
    # again on a fresh snapshot rather than failing.
    assert "met a concurrent update; deciding again" in caplog.text
    assert Experiment.objects.get(pk=experiment.pk).state == Experiment.State.CANCELED
    assert not Trial.objects.exists() and not Allocation.objects.exists()

    later = ExperimentFactory()
    assert scheduling.scheduler_pass() == 1
    assert Experiment.objects.get(pk=later.pk).state == Experiment.State.SCHEDULED
