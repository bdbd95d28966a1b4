"""The scheduler benchmark's simulated cluster: what it declares, and how its trials end."""

import pytest
from django.conf import settings

from bench.scheduler_child import drain
from bench.scheduler_load import (
    NODES,
    cluster_declare,
    queue_fill,
    queue_reset,
    trials_end,
    trials_preempted,
)
from tests.factories import ExperimentFactory, UserFactory
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


def test_every_queued_request_fits_its_owners_quota_so_the_queue_can_drain() -> None:
    """The user without a team has a quota of their own (PLATFORM_USER_GPU_QUOTA): a request
    over it waits forever, and the drain never ended."""
    queue_fill(seed=1)
    assert Experiment.objects.filter(owner__team__isnull=True).exists()
    for experiment in Experiment.objects.select_related("owner__team"):
        quota = (experiment.owner.team.gpu_quota if experiment.owner.team
                 else settings.PLATFORM.user_gpu_quota)
        assert experiment.workers * experiment.gpus_per_worker <= quota, experiment.name


def test_a_queue_that_cannot_drain_fails_at_once_and_says_why() -> None:
    cluster_declare()
    over = settings.PLATFORM.user_gpu_quota + 4
    ExperimentFactory(owner=UserFactory(), workers=1, gpus_per_worker=over)
    with pytest.raises(RuntimeError) as stalled:
        drain(seed=1, run_min=0.1, run_max=0.2, timeout=60)
    assert "the queue stopped draining" in str(stalled.value)
    assert "1 × 'Quota of a user without a team of" in str(stalled.value)
    assert f"this needs {over}" in str(stalled.value)
