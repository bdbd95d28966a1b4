"""One queue order: the position a user sees is the scheduler's, ties included."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.factories import ExperimentFactory, NodeFactory
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.selectors.scheduling import (
    experiment_queue_position,
    experiments_queued_ahead,
)
from tfplatform.experiments.services.scheduling import scheduler_pass

pytestmark = pytest.mark.django_db


def test_the_position_shown_is_the_schedulers_own() -> None:
    NodeFactory()  # online, but with no devices: nothing can start, everything queues
    now = timezone.now()
    made = [
        ExperimentFactory(priority=priority, gpus_per_worker=1)
        for priority in (0, 5, 0, 5, -3, 0)
    ]
    same_moment = [made[0], made[2], made[5]]  # created together: ids break the tie
    Experiment.objects.filter(pk__in=[e.pk for e in same_moment]).update(created_at=now)
    Experiment.objects.filter(pk=made[1].pk).update(created_at=now + timedelta(seconds=1))
    Experiment.objects.filter(pk=made[3].pk).update(created_at=now - timedelta(seconds=1))

    assert scheduler_pass() == 0
    for experiment in Experiment.objects.all():
        shown = experiment_queue_position(experiment=experiment)
        [scheduler] = re.findall(r"Queue position (\d+)\.", experiment.pending_reason)
        assert shown == int(scheduler), experiment.pending_reason
    assert experiments_queued_ahead(priority=0) == 5  # both 5s and the three 0s
    assert experiments_queued_ahead(priority=6) == 0
