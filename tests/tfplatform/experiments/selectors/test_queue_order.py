"""One queue order: the position a user sees is the place the scheduler considers it in, ties
included, whether read for one experiment or for a page."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import ExperimentFactory, NodeFactory, UserFactory
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.selectors.scheduling import (
    experiment_queue_position,
    experiments_queue_positions,
    experiments_queued,
    experiments_queued_ahead,
)
from tfplatform.experiments.services.scheduling import scheduler_pass

pytestmark = pytest.mark.django_db


def test_the_position_shown_is_the_schedulers_own() -> None:
    NodeFactory()  # online, but with no devices: nothing can start, everything queues
    now = timezone.now()
    owner = UserFactory(is_staff=True)
    made = [
        ExperimentFactory(priority=priority, gpus_per_worker=1, owner=owner)
        for priority in (0, 5, 0, 5, -3, 0)
    ]
    same_moment = [made[0], made[2], made[5]]  # created together: ids break the tie
    Experiment.objects.filter(pk__in=[e.pk for e in same_moment]).update(created_at=now)
    Experiment.objects.filter(pk=made[1].pk).update(created_at=now + timedelta(seconds=1))
    Experiment.objects.filter(pk=made[3].pk).update(created_at=now - timedelta(seconds=1))
    done = ExperimentFactory(owner=owner)
    Experiment.objects.filter(pk=done.pk).update(state=Experiment.State.COMPLETED)

    assert scheduler_pass() == 0
    considered = [e.pk for e in experiments_queued()]  # the scheduler's order
    expected = {pk: place for place, pk in enumerate(considered, start=1)}
    assert [made[i].pk for i in (3, 1, 0, 2, 5, 4)] == considered
    assert experiments_queue_positions(experiment_ids=[*expected, done.pk]) == expected
    for experiment in Experiment.objects.all():
        assert experiment_queue_position(experiment=experiment) == expected.get(experiment.pk)

    client = APIClient()
    client.force_authenticate(owner)
    page = client.get("/api/v1/experiments/", {"page_size": 100}).json()["results"]
    for row in page:
        position = expected.get(row["id"])
        assert row["queue_position"] == position
        if position is not None:
            assert row["pending_reason"].endswith(f" Queue position {position}.")
    detail = client.get(f"/api/v1/experiments/{made[4].pk}/").json()
    assert detail["queue_position"] == 6
    assert detail["pending_reason"] == (
        f"{Experiment.objects.get(pk=made[4].pk).pending_reason} Queue position 6.")
    assert experiments_queued_ahead(priority=0) == 5  # both 5s and the three 0s
    assert experiments_queued_ahead(priority=6) == 0
