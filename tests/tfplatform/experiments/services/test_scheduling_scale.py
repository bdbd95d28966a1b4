"""The scheduler at scale: 1,000 queued experiments on 50 nodes, decided soundly in a bounded
number of queries. How fast is measured side by side in `bench/scheduler.py`, not asserted here."""

import random

import pytest
from django.db import connection
from django.db.models import Count
from django.test.utils import CaptureQueriesContext

from tests.factories import NodeFactory, TeamFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.cluster.models import Allocation, Device
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services.scheduling import scheduler_pass

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _placement_only(platform_settings_override: PlatformSettingsOverride) -> None:
    """A full cluster under GPU quotas alone; the CPU-slot quota and the per-user running limit
    have their own tests (test_admission.py)."""
    platform_settings_override(user_max_running=0, user_cpu_slot_quota=10_000)

NODES = 50
QUEUED = 1000


def declare_cluster() -> None:
    nodes = NodeFactory.create_batch(NODES)
    Device.objects.bulk_create(
        Device(node=node, kind=kind, index=index, name="slot", emulated=True)
        for node in nodes
        for kind, count in ((Device.Kind.GPU, 8), (Device.Kind.CPU, 4))
        for index in range(count)
    )


def enqueue(*, count: int, rng: random.Random, priority: int | None = None) -> None:
    owners = [UserFactory(team=TeamFactory(gpu_quota=quota, cpu_slot_quota=10_000))
              for quota in (16, 64, 1000)]
    owners.append(UserFactory())
    experiments = []
    for index in range(count):
        owner = rng.choice(owners)
        experiments.append(
            Experiment(
                owner=owner,
                team=owner.team,
                name=f"load-{index}",
                model="mlp",
                dataset="digits",
                workers=rng.choice((1, 1, 2, 4)),
                gpus_per_worker=rng.choice((0, 1, 2, 4, 8)),
                parameter_servers=rng.choice((0, 0, 1)),
                priority=rng.choice((0, 0, 5)) if priority is None else priority,
            )
        )
    Experiment.objects.bulk_create(experiments)


def assert_sound() -> None:
    held = Allocation.objects.filter(released_at__isnull=True)
    assert not held.values("device").annotate(n=Count("id")).filter(n__gt=1).exists()
    per_team = (
        held.filter(device__kind="gpu", trial__experiment__team__isnull=False)
        .values("trial__experiment__team_id", "trial__experiment__team__gpu_quota")
        .annotate(n=Count("id"))
    )
    for row in per_team:
        assert row["n"] <= row["trial__experiment__team__gpu_quota"], row


def test_a_thousand_queued_on_fifty_nodes_in_a_few_queries() -> None:
    declare_cluster()
    enqueue(count=QUEUED, rng=random.Random(1))

    assert scheduler_pass() > 50
    assert_sound()

    # Nothing changed: reading the cluster and the queue is all a pass costs.
    with CaptureQueriesContext(connection) as queries:
        assert scheduler_pass() == 0
    assert len(queries) <= 8


def test_urgent_arrivals_preempt_at_scale() -> None:
    declare_cluster()
    enqueue(count=QUEUED, rng=random.Random(2))
    scheduler_pass()
    enqueue(count=20, rng=random.Random(3), priority=10)

    scheduler_pass()
    assert Trial.objects.filter(stop_reason="preempted").exists()
    urgent = Experiment.objects.filter(priority=10, state="queued")
    assert urgent.filter(pending_reason__contains="lower-priority trial").exists()
    assert_sound()
