"""No one user can hold the cluster: sizes that could never run are refused at submission, CPU
slots have quotas like GPUs, and each user has limits on what they queue and run at once."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import DeviceFactory, NodeFactory, TeamFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.searches.conftest import trial_trains
from tfplatform.cluster.models import Device, Node
from tfplatform.cluster.services import allocations_release
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.experiments.services.trials import trial_finish
from tfplatform.searches.models import SearchTrial
from tfplatform.searches.services import searches_settle_overdue

pytestmark = pytest.mark.django_db


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def submit(user: Any, *, workers: int = 1, gpus: int = 0, ps: int = 0) -> Any:
    return api(user).post("/api/v1/experiments/", {
        "name": "sized", "model": "mlp", "dataset": "digits",
        "resources": {"workers": workers, "gpus_per_worker": gpus, "parameter_servers": ps},
    }, format="json")


def node(*, gpus: int = 0, cpus: int = 0) -> Node:
    made = NodeFactory()
    for index in range(gpus):
        DeviceFactory(node=made, kind=Device.Kind.GPU, index=index)
    for index in range(cpus):
        DeviceFactory(node=made, kind=Device.Kind.CPU, index=index)
    return made


def queued(user: Any) -> list[Experiment]:
    return list(Experiment.objects.filter(owner=user, state="queued").order_by("pk"))


def test_more_gpus_than_the_team_quota_is_refused_with_a_field_error() -> None:
    node(gpus=8)
    user = UserFactory(team=TeamFactory(gpu_quota=4))
    response = submit(user, workers=3, gpus=2)
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_input"
    assert body["resources"] == [body["error"]]
    assert "Needs 6 GPUs; your team's quota is 4" in body["error"]
    assert submit(user, workers=2, gpus=2).status_code == 201
    assert not Experiment.objects.filter(workers=3).exists()


def test_a_user_without_a_team_is_held_to_the_platform_quota(
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(user_gpu_quota=1)
    node(gpus=4)
    response = submit(UserFactory(), gpus=2)
    assert response.status_code == 400
    assert "your quota is 1" in response.json()["error"]


def test_a_worker_larger_than_every_node_is_refused_but_not_before_any_node_exists() -> None:
    user = UserFactory(team=TeamFactory(gpu_quota=16))
    # No node registered yet: the cluster is being set up; it queues and says why it waits.
    assert submit(user, gpus=8).status_code == 201
    node(gpus=4)
    gone = NodeFactory(state=Node.State.LOST)
    DeviceFactory(node=gone, kind=Device.Kind.GPU, index=0)
    response = submit(user, gpus=8)
    assert response.status_code == 400
    assert "a worker needs 8 GPUs on one node, the largest has 4" in response.json()["error"]
    # Together the nodes have enough, but a gang never spans a task over nodes.
    assert submit(user, workers=2, gpus=4).status_code == 400
    assert submit(user, workers=1, gpus=4).status_code == 201


def test_cpu_slots_have_a_team_quota_the_scheduler_holds() -> None:
    node(cpus=8)
    team = TeamFactory(cpu_slot_quota=3)
    first, second = UserFactory(team=team), UserFactory(team=team)
    response = submit(first, workers=3, ps=1)
    assert response.status_code == 400
    assert "Needs 4 CPU slots; your team's quota is 3" in response.json()["error"]

    assert submit(first, workers=2, ps=1).status_code == 201  # 3 slots: the whole quota
    assert submit(second, workers=1).status_code == 201
    assert submit(UserFactory(), workers=1).status_code == 201  # another quota

    assert scheduler_pass() == 2
    (waiting,) = Experiment.objects.filter(state="queued")
    assert waiting.owner == second
    assert waiting.pending_reason == "Team quota of 3 CPU slots: 3 in use, this needs 1."


def test_a_users_queued_limit_refuses_with_429_and_a_stable_code(
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(user_max_queued=2)
    user = UserFactory(team=TeamFactory())
    assert submit(user).status_code == 201
    assert submit(user).status_code == 201
    response = submit(user)
    assert response.status_code == 429
    assert response.json()["code"] == "limit_reached"
    assert "You have 2 experiments queued, your limit" in response.json()["error"]
    assert len(queued(user)) == 2
    # The limit is each user's own, not the team's.
    teammate = UserFactory(team=user.team)
    assert submit(teammate).status_code == 201
    # Cancelling makes room.
    api(user).post(f"/api/v1/experiments/{queued(user)[0].pk}/cancel/")
    assert submit(user).status_code == 201


@pytest.mark.parametrize(("team_limit", "staff", "allowed"), [
    (None, False, 1), (3, False, 3), (0, False, 5), (None, True, 5),
])
def test_a_team_overrides_the_queued_limit_and_staff_have_none(
    platform_settings_override: PlatformSettingsOverride, team_limit: int | None, staff: bool,
    allowed: int,
) -> None:
    platform_settings_override(user_max_queued=1)
    user = UserFactory(team=TeamFactory(user_max_queued=team_limit), is_staff=staff)
    codes = [submit(user).status_code for _ in range(5)]
    assert codes == [201] * allowed + [429] * (5 - allowed)


def test_the_running_limit_keeps_a_users_extra_experiments_queued(
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(user_max_running=2)
    node(cpus=8)
    busy, other = UserFactory(team=TeamFactory()), UserFactory()
    for _ in range(4):
        assert submit(busy).status_code == 201
    assert submit(other).status_code == 201

    assert scheduler_pass() == 3
    assert Experiment.objects.filter(owner=busy).exclude(state="queued").count() == 2
    assert not queued(other)
    for waiting in queued(busy):
        assert waiting.pending_reason == (
            "Its owner has 2 experiments running, their limit; it starts when one of them ends.")

    started = Experiment.objects.filter(owner=busy, state="scheduled").first()
    assert started is not None
    trial_trains_after_schedule(started)
    assert scheduler_pass() == 1
    assert len(queued(busy)) == 1


def trial_trains_after_schedule(experiment: Experiment) -> None:
    """A scheduled experiment's trial ends and lets go of its devices."""
    trial = experiment.trials.get()
    experiment_transition(experiment=experiment, to="running")
    trial_finish(trial=trial, state="completed", exit_reason="")
    allocations_release(trial_id=trial.pk)
    experiment_transition(experiment=experiment, to="completed")


def test_workspace_sessions_have_a_per_user_limit_a_restart_does_not_trip(
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(user_max_workspaces=1)
    node(cpus=4)
    user = UserFactory()
    client = api(user)
    first = client.post("/api/v1/workspaces/", {"name": "one"}, format="json")
    assert first.status_code == 201, first.json()
    second = client.post("/api/v1/workspaces/", {"name": "two"}, format="json")
    assert second.status_code == 429
    assert second.json()["code"] == "limit_reached"
    assert "1 workspace sessions queued or running, your limit" in second.json()["error"]
    # A restart replaces its own session: it is not a second one.
    restarted = client.post(f"/api/v1/workspaces/{first.json()['id']}/restart/",
                            {"cpu_slots": 2}, format="json")
    assert restarted.status_code in (200, 202), restarted.json()
    # Training experiments are not workspace sessions.
    assert submit(user).status_code == 201


def test_a_workspace_larger_than_every_node_is_refused_on_its_field() -> None:
    node(cpus=2)
    response = api(UserFactory()).post("/api/v1/workspaces/", {"name": "big", "cpu_slots": 4},
                                       format="json")
    assert response.status_code == 400
    assert response.json()["cpu_slots"] == [response.json()["error"]]
    assert "needs 4 CPU slots on one node, the largest has 2" in response.json()["error"]


def test_a_search_queues_what_the_limit_allows_and_fills_later(
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(user_max_queued=2)
    user = UserFactory()
    client = api(user)
    body = {"name": "sweep", "model": "mlp", "dataset": "digits", "searcher": "random",
            "space": {"learning_rate": {"low": 0.001, "high": 0.1, "log": True}},
            "max_trials": 4, "max_concurrent": 3}
    response = client.post("/api/v1/searches/", body, format="json")
    assert response.status_code == 201, response.json()
    search_id = response.json()["id"]
    assert SearchTrial.objects.filter(search_id=search_id).count() == 2
    # The queue is full: a second search cannot queue a single trial, and says so.
    refused = client.post("/api/v1/searches/", body, format="json")
    assert refused.status_code == 429 and refused.json()["code"] == "limit_reached"

    # Both trials end; with none left to end, the scheduler's loop fills the search again.
    for member in SearchTrial.objects.filter(search_id=search_id).select_related("experiment"):
        trial_trains(member.experiment, values={1: 0.5})
    assert searches_settle_overdue() == [search_id]
    assert SearchTrial.objects.filter(search_id=search_id).count() == 4
    assert len(queued(user)) == 2
