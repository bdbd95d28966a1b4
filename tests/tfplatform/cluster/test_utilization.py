from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from tests.factories import DeviceFactory, ExperimentFactory, NodeFactory, UserFactory
from tfplatform.cluster.models import Node, UtilizationSample
from tfplatform.cluster.services import allocations_release
from tfplatform.cluster.utilization import utilization_record, utilization_samples
from tfplatform.experiments.selectors.experiments import experiment_state_counts
from tfplatform.experiments.services.scheduling import scheduler_pass

pytestmark = pytest.mark.django_db


def node_with(*, gpus: int = 0, cpus: int = 0, **kwargs: object) -> Node:
    node = NodeFactory(**kwargs)
    for index in range(gpus):
        DeviceFactory(node=node, kind="gpu", index=index)
    for index in range(cpus):
        DeviceFactory(node=node, kind="cpu", index=index)
    return node


def counts(sample: UtilizationSample) -> tuple[int, ...]:
    return (
        sample.gpus_total,
        sample.gpus_used,
        sample.cpu_slots_total,
        sample.cpu_slots_used,
        sample.queued,
        sample.running,
    )


def test_record_counts_capacity_held_devices_and_experiments() -> None:
    node_with(gpus=2, cpus=1)
    node_with(gpus=1, state=Node.State.CORDONED)  # still capacity, just not for new work
    node_with(gpus=4, cpus=2, state=Node.State.LOST)  # gone: no capacity at all
    gpu_job = ExperimentFactory(gpus_per_worker=1)
    cpu_job = ExperimentFactory()
    ExperimentFactory(gpus_per_worker=8)  # fits nowhere, stays queued
    ExperimentFactory(state="running")
    ExperimentFactory(state="completed")
    assert scheduler_pass() == 2

    assert counts(utilization_record(**experiment_state_counts())) == (3, 1, 1, 1, 1, 1)

    allocations_release(trial_id=cpu_job.trials.get().pk)
    allocations_release(trial_id=gpu_job.trials.get().pk)
    assert counts(utilization_record(**experiment_state_counts())) == (3, 0, 1, 0, 1, 1)


def test_record_on_an_empty_cluster_is_all_zero() -> None:
    assert counts(utilization_record(**experiment_state_counts())) == (0, 0, 0, 0, 0, 0)


def test_record_prunes_samples_older_than_a_week() -> None:
    now = timezone.now()
    UtilizationSample.objects.create(recorded_at=now - timedelta(days=8))
    kept = UtilizationSample.objects.create(recorded_at=now - timedelta(days=6))
    fresh = utilization_record(**experiment_state_counts())
    assert list(UtilizationSample.objects.all()) == [kept, fresh]


def test_samples_are_the_newest_n_oldest_first() -> None:
    now = timezone.now()
    samples = [
        UtilizationSample.objects.create(recorded_at=now - timedelta(seconds=10 * age), queued=age)
        for age in range(5)
    ]
    assert utilization_samples(limit=3) == [samples[2], samples[1], samples[0]]


# The loop closes stale connections after each pass, which a test's open transaction can't survive.
@pytest.mark.django_db(transaction=True)
def test_scheduler_loop_records_a_sample() -> None:
    node_with(cpus=1)
    ExperimentFactory(gpus_per_worker=1)  # stays queued: nothing gets dispatched to a broker
    call_command("scheduler", "--once", stdout=StringIO())
    assert counts(UtilizationSample.objects.get()) == (0, 0, 1, 0, 1, 0)


def test_admin_lists_samples_read_only() -> None:
    sample = utilization_record(**experiment_state_counts())
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    url = f"/admin/cluster/utilizationsample/{sample.pk}/change/"
    listing = client.get("/admin/cluster/utilizationsample/")
    assert listing.status_code == 200 and url in listing.content.decode()
    assert client.get("/admin/cluster/utilizationsample/add/").status_code == 403
    change = client.get(url)
    assert change.status_code == 200 and "Save" not in change.content.decode()
