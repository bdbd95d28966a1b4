"""The scheduler benchmark's simulated cluster: what it declares, and how its trials end."""

import pytest

from bench.scheduler_load import (
    NODES,
    cluster_declare,
    queue_fill,
    queue_reset,
    trials_end,
    trials_preempted,
)
from tfplatform.cluster.models import Allocation, Device
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services.scheduling import scheduler_pass

pytestmark = pytest.mark.django_db


def test_trials_end_and_reset_give_the_devices_back() -> None:
    cluster_declare()
    queue_fill(seed=3, count=300)
    assert Device.objects.filter(kind="gpu").count() == NODES * 8
    assert Experiment.objects.filter(state="queued").count() == 300

    scheduled = scheduler_pass()
    assert 0 < scheduled < 300
    trials = list(Trial.objects.values_list("pk", flat=True))
    held = Allocation.objects.filter(released_at__isnull=True).count()
    assert len(trials) == scheduled and held >= scheduled

    trials_end(trial_ids=trials[:10])
    assert Experiment.objects.filter(state="completed").count() == 10
    released = Allocation.objects.of_trials().filter(holder_id__in=trials[:10])
    assert released.exists() and not released.filter(released_at__isnull=True).exists()

    Trial.objects.filter(pk=trials[10]).update(stop_reason="preempted")
    assert trials_preempted() == [trials[10]]
    assert Experiment.objects.get(trials__pk=trials[10]).state == "queued"

    queue_reset()
    assert not Trial.objects.exists() and not Allocation.objects.exists()
    assert Experiment.objects.filter(state="queued").count() == 300
    assert scheduler_pass() == scheduled  # the same queue on the same idle cluster
