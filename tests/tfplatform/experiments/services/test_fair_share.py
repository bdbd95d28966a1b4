"""Fair share: a team's quota is guaranteed; up to its limit it borrows what other teams leave
idle, shared among borrowers by weight, and gives it back (preempted, resumed from its
checkpoint later) when a team within its guarantee needs it."""

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import TeamFactory, UserFactory, node_with_gpus
from tfplatform.accounts.models import Team
from tfplatform.cluster.models import Allocation
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.experiments.services.transitions import experiment_transition

pytestmark = pytest.mark.django_db



def submit(user: Any, *, gpus_per_worker: int = 1, priority: int = 0) -> int:
    client = APIClient()
    client.force_authenticate(user)
    response = client.post("/api/v1/experiments/", {
        "name": "fair", "model": "mlp", "dataset": "digits", "priority": priority,
        "resources": {"workers": 1, "gpus_per_worker": gpus_per_worker},
    }, format="json")
    assert response.status_code == 201, response.json()
    return int(response.json()["id"])


def running(team: Team) -> list[Experiment]:
    return list(Experiment.objects.filter(team=team, state="scheduled").order_by("pk"))


def borrowed_ids() -> set[int]:
    return set(Trial.objects.filter(borrowed=True, state__in=("pending", "running"))
               .values_list("experiment_id", flat=True))


def preempted_trial_ends(experiment_id: int) -> None:
    """What the node reports once a preempted trial checkpointed and stopped: its devices go
    back and the experiment queues again, to resume from its checkpoint."""
    trial = Trial.objects.get(experiment_id=experiment_id, state__in=("pending", "running"))
    Allocation.objects.filter(trial=trial).update(released_at=timezone.now())
    trial.state = Trial.State.CANCELED
    trial.save(update_fields=["state"])
    experiment_transition(experiment=Experiment.objects.get(pk=experiment_id), to="queued",
                          pending_reason="Preempted; resumes from its last checkpoint.")


def test_a_team_borrows_idle_gpus_up_to_its_limit_and_says_where_it_stops() -> None:
    node_with_gpus(gpus=4)
    lender = TeamFactory(name="lender", gpu_quota=3)
    borrower = TeamFactory(name="borrower", gpu_quota=1, gpu_limit=3)
    user = UserFactory(team=borrower)
    ids = [submit(user) for _ in range(4)]

    assert scheduler_pass() == 3
    assert [e.pk for e in running(borrower)] == ids[:3]
    assert borrowed_ids() == set(ids[1:3])  # the first is within its guarantee
    waiting = Experiment.objects.get(pk=ids[3])
    assert waiting.pending_reason == "Team limit of 3 GPUs (guaranteed 1): 3 in use, this needs 1."
    del lender


def test_more_than_the_limit_is_refused_at_submission() -> None:
    node_with_gpus(gpus=8)
    user = UserFactory(team=TeamFactory(gpu_quota=1, gpu_limit=3))
    client = APIClient()
    client.force_authenticate(user)
    response = client.post("/api/v1/experiments/", {
        "name": "big", "model": "mlp", "dataset": "digits",
        "resources": {"workers": 2, "gpus_per_worker": 2}}, format="json")
    assert response.status_code == 400
    assert "your team's limit is 3" in response.json()["error"]
    assert submit(user, gpus_per_worker=3)


def test_a_team_within_its_guarantee_reclaims_what_another_borrowed() -> None:
    node_with_gpus(gpus=4)
    owners = TeamFactory(name="owners", gpu_quota=3)
    borrower = TeamFactory(name="borrower", gpu_quota=1, gpu_limit=4)
    b_user = UserFactory(team=borrower)
    b_ids = [submit(b_user, priority=5) for _ in range(4)]
    assert scheduler_pass() == 4  # three of them on the owners' idle GPUs
    assert borrowed_ids() == set(b_ids[1:])
    for pk in b_ids:
        experiment_transition(experiment=Experiment.objects.get(pk=pk), to="running")

    # The owners come back, at a lower priority than the borrower's: the guarantee wins.
    a_id = submit(UserFactory(team=owners), gpus_per_worker=2, priority=0)
    assert scheduler_pass() == 0
    stopped = set(Trial.objects.filter(stop_reason="preempted")
                  .values_list("experiment_id", flat=True))
    assert len(stopped) == 2 and stopped <= set(b_ids[1:])  # borrowed ones, never the first
    assert Experiment.objects.get(pk=a_id).pending_reason.startswith(
        "Waiting to reclaim 2 GPUs borrowed by borrower; devices on ")

    for pk in stopped:
        preempted_trial_ends(pk)
    assert scheduler_pass() == 1
    assert Experiment.objects.get(pk=a_id).state == "scheduled"
    # The preempted work waits to borrow again, and says why.
    for pk in stopped:
        reason = Experiment.objects.get(pk=pk).pending_reason
        assert reason.startswith("Over its team's guarantee (1 GPUs, 64 CPU slots): it borrows "
                                 "only devices other teams leave idle"), reason


def test_borrowers_share_idle_gpus_by_weight() -> None:
    node_with_gpus(gpus=8)
    TeamFactory(name="idle-owner", gpu_quota=4)  # guaranteed 4, using none
    heavy = TeamFactory(name="heavy", gpu_quota=1, gpu_limit=8, over_quota_weight=3)
    light = TeamFactory(name="light", gpu_quota=1, gpu_limit=8, over_quota_weight=1)
    for team in (light, heavy):  # the light team submits first: order does not buy a share
        user = UserFactory(team=team)
        for _ in range(8):
            submit(user)
    assert scheduler_pass() == 8
    # Each has its guaranteed one; of the six idle GPUs the team borrowing least for its
    # weight takes the next: light, heavy ×3 (1/3, 2/3, 1 per weight), light, heavy.
    held = {team.name: len(running(team)) for team in (heavy, light)}
    assert held == {"heavy": 5, "light": 3}, held


def test_a_borrower_never_preempts_even_at_a_higher_priority() -> None:
    node_with_gpus(gpus=2)
    owners = TeamFactory(gpu_quota=2)
    low = submit(UserFactory(team=owners), gpus_per_worker=2, priority=0)
    assert scheduler_pass() == 1
    experiment_transition(experiment=Experiment.objects.get(pk=low), to="running")
    borrower = UserFactory(team=TeamFactory(gpu_quota=0, gpu_limit=2, max_priority=100))
    high = submit(borrower, priority=50)
    assert scheduler_pass() == 0
    assert not Trial.objects.filter(stop_reason="preempted").exists()
    assert Experiment.objects.get(pk=high).pending_reason.startswith(
        "Over its team's guarantee (0 GPUs")


def test_without_a_limit_a_quota_is_a_hard_cap_as_before() -> None:
    node_with_gpus(gpus=4)
    user = UserFactory(team=TeamFactory(gpu_quota=1))
    first, second = submit(user), submit(user)
    assert scheduler_pass() == 1
    assert Experiment.objects.get(pk=second).pending_reason == (
        "Team quota of 1 GPUs: 1 in use, this needs 1.")
    assert not borrowed_ids()
    del first


def test_the_cluster_page_shows_each_teams_guarantee_use_and_borrowing() -> None:
    node_with_gpus(gpus=4)
    TeamFactory(name="owners", gpu_quota=3)
    borrower = TeamFactory(name="borrower", gpu_quota=1, gpu_limit=3, over_quota_weight=2)
    user = UserFactory(team=borrower)
    for _ in range(3):
        submit(user)
    assert scheduler_pass() == 3
    client = Client()
    client.force_login(UserFactory(is_staff=True))
    html = client.get("/cluster/").content.decode()
    row = html[html.index('id="team-borrower"'):]
    row = row[:row.index("</tr>")]
    cells = [cell.split("</td>")[0] for cell in row.split('<td class="num">')[1:]]
    # GPUs held, borrowed, guaranteed, limit; CPU slots held, borrowed, guaranteed, limit; weight
    assert cells == ["3", "2", "1", "3", "0", "0", "64", "64", "2"], cells


def test_a_borrowed_trial_is_its_teams_own_once_the_team_is_back_within_its_guarantee() -> None:
    node_with_gpus(gpus=2)
    owners = TeamFactory(name="owners", gpu_quota=2)
    borrower = TeamFactory(name="borrower", gpu_quota=1, gpu_limit=2)
    b_user = UserFactory(team=borrower)
    first, second = submit(b_user), submit(b_user)
    assert scheduler_pass() == 2
    assert borrowed_ids() == {second}
    for pk in (first, second):
        experiment_transition(experiment=Experiment.objects.get(pk=pk), to="running")
    # The borrower's guaranteed trial ends: what it still holds is within its guarantee.
    Allocation.objects.filter(trial__experiment_id=first).update(released_at=timezone.now())
    Trial.objects.filter(experiment_id=first).update(state="completed")
    experiment_transition(experiment=Experiment.objects.get(pk=first), to="completed")
    # Two GPUs for the owners: one is idle, the other is the borrower's own now.
    waiting = submit(UserFactory(team=owners), gpus_per_worker=1)
    assert scheduler_pass() == 1
    assert Experiment.objects.get(pk=waiting).state == "scheduled"
    late = submit(UserFactory(team=owners), gpus_per_worker=1)
    assert scheduler_pass() == 0
    assert not Trial.objects.filter(stop_reason="preempted").exists()
    reason = Experiment.objects.get(pk=late).pending_reason
    assert reason.startswith("Needs 1 GPUs on one node; the largest free block is 0."), reason
