import pytest

from tests.factories import DeviceFactory, ExperimentFactory, NodeFactory, TeamFactory, UserFactory
from tfplatform.cluster.models import Allocation
from tfplatform.cluster.scheduler import scheduler_pass
from tfplatform.experiments.models import Experiment

pytestmark = pytest.mark.django_db


def node_with(*, gpus: int = 0, cpus: int = 1, **kwargs: object) -> object:
    node = NodeFactory(**kwargs)
    for index in range(gpus):
        DeviceFactory(node=node, kind="gpu", index=index)
    for index in range(cpus):
        DeviceFactory(node=node, kind="cpu", index=index)
    return node


def test_cpu_experiment_takes_a_cpu_slot_and_creates_a_trial() -> None:
    node_with(cpus=1)
    experiment = ExperimentFactory()
    assert scheduler_pass() == 1
    experiment.refresh_from_db()
    assert experiment.state == "scheduled"
    allocation = Allocation.objects.get()
    assert allocation.device.kind == "cpu" and allocation.trial.experiment == experiment


def test_gang_gets_all_devices_or_none() -> None:
    node_with(gpus=2)
    node_with(gpus=1)
    experiment = ExperimentFactory(workers=2, gpus_per_worker=2)
    assert scheduler_pass() == 0
    experiment.refresh_from_db()
    assert experiment.state == "queued"
    assert Allocation.objects.count() == 0
    assert "Needs 2 GPUs on one node; the largest free block is 2" in experiment.pending_reason


def test_multi_worker_gang_spans_nodes() -> None:
    node_with(gpus=1, cpus=0)
    node_with(gpus=1, cpus=0)
    experiment = ExperimentFactory(workers=2, gpus_per_worker=1)
    assert scheduler_pass() == 1
    nodes = set(Allocation.objects.values_list("node__hostname", flat=True))
    assert len(nodes) == 2
    assert Experiment.objects.get(pk=experiment.pk).state == "scheduled"


def test_best_fit_keeps_large_blocks_whole() -> None:
    node_with(gpus=4, cpus=0, hostname="big")
    node_with(gpus=1, cpus=0, hostname="small")
    ExperimentFactory(gpus_per_worker=1)
    scheduler_pass()
    assert Allocation.objects.get().node.hostname == "small"


def test_priority_then_submission_order() -> None:
    node_with(cpus=1)
    first = ExperimentFactory()
    urgent = ExperimentFactory(priority=10)
    scheduler_pass()
    assert Experiment.objects.get(pk=urgent.pk).state == "scheduled"
    first.refresh_from_db()
    assert first.state == "queued"
    assert "Queue position 1" in first.pending_reason


def test_team_quota_holds() -> None:
    node_with(gpus=4, cpus=0)
    team = TeamFactory(gpu_quota=2)
    owner = UserFactory(team=team)
    ExperimentFactory(owner=owner, gpus_per_worker=2)
    blocked = ExperimentFactory(owner=owner, gpus_per_worker=1)
    scheduler_pass()
    blocked.refresh_from_db()
    assert blocked.state == "queued"
    assert "Team quota of 2 GPUs: 2 in use" in blocked.pending_reason


def test_no_nodes_says_so() -> None:
    experiment = ExperimentFactory()
    scheduler_pass()
    experiment.refresh_from_db()
    assert experiment.pending_reason.startswith("No worker node is online")


def test_cordoned_node_gets_no_work() -> None:
    node_with(cpus=1, state="cordoned")
    experiment = ExperimentFactory()
    assert scheduler_pass() == 0
    experiment.refresh_from_db()
    assert experiment.state == "queued"
