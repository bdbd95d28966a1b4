"""Shares of GPUs: a worker or a workspace asks for a fraction of one GPU or an amount of its
memory; placement packs shares onto one GPU, never above the whole and never beside a whole
holder; quotas and showback count the share; the task gets TensorFlow's memory limit for it."""

from datetime import UTC, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import DeviceFactory, NodeFactory, TeamFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.cluster.models import Allocation, Device, Node
from tfplatform.cluster.placement import TaskNeed, gang_place, task_needs
from tfplatform.cluster.services import allocations_claim_part
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services.execution import trial_spec_build
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.experiments.usage.report import usage_report
from tfplatform.experiments.usage.rows import usage_query

pytestmark = pytest.mark.django_db

GIB = 2**30


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def gpu_node(*, gpus: int = 1, memory_gib: int = 0) -> Node:
    node = NodeFactory()
    for index in range(gpus):
        DeviceFactory(node=node, kind=Device.Kind.GPU, index=index, emulated=not memory_gib,
                      memory_bytes=memory_gib * GIB, name="NVIDIA A100" if memory_gib else "slot")
    DeviceFactory(node=node, kind=Device.Kind.CPU, index=0)
    return node


def submit(user: Any, **resources: Any) -> Any:
    return api(user).post("/api/v1/experiments/", {
        "name": "shared", "model": "mlp", "dataset": "digits",
        "resources": {"workers": 1, **resources},
    }, format="json")


def held(experiment_id: int) -> list[tuple[int | None, int]]:
    return list(Allocation.objects.filter(trial__experiment_id=experiment_id, released_at=None)
                .values_list("device_id", "share_milli"))


def test_shares_fill_the_fullest_shared_gpu_that_still_holds_them() -> None:
    half, quarter = TaskNeed("worker", 0, 0, gpu_milli=500), TaskNeed("worker", 0, 0, gpu_milli=250)
    shared = {1: {10: 500}, 2: {20: 750}}
    (placed,) = gang_place(needs=[quarter], free={1: {"gpu": [11]}, 2: {"gpu": []}},
                           shared=shared) or []
    assert (placed.device_ids, placed.share_milli) == ((20,), 250)  # 750 + 250: full
    (placed,) = gang_place(needs=[half], free={1: {"gpu": [11]}, 2: {"gpu": []}},
                           shared=shared) or []
    assert placed.device_ids == (10,)
    # Nothing shared has room: a free GPU is taken for shares, on the node with fewest free
    # (large blocks stay whole for whole-GPU jobs).
    (placed,) = gang_place(needs=[TaskNeed("worker", 0, 0, gpu_milli=600)],
                           free={1: {"gpu": [11, 12]}, 3: {"gpu": [30]}}, shared=shared) or []
    assert (placed.node_id, placed.device_ids, placed.share_milli) == (3, (30,), 600)


def test_a_gang_of_shares_packs_onto_one_gpu_and_never_past_the_whole() -> None:
    needs = task_needs(workers=3, gpus_per_worker=0, parameter_servers=0, gpu_milli=400)
    placed = gang_place(needs=needs, free={1: {"gpu": [10, 11]}}) or []
    assert [p.device_ids for p in placed] == [(10,), (10,), (11,)]
    assert [p.share_milli for p in placed] == [400, 400, 400]
    assert gang_place(needs=needs, free={1: {"gpu": [10]}}) is None


def test_an_amount_of_memory_is_that_part_of_the_gpu_it_gets_and_needs_known_memory() -> None:
    need = TaskNeed("worker", 0, 0, gpu_memory_mb=4096)
    (placed,) = gang_place(needs=[need], free={1: {"gpu": [10]}}, memory_mb={10: 16384}) or []
    assert placed.share_milli == 250
    assert gang_place(needs=[need], free={1: {"gpu": [10]}}, memory_mb={10: 0}) is None
    assert gang_place(needs=[need], free={1: {"gpu": [10]}}, memory_mb={10: 2048}) is None


def test_two_halves_share_a_gpu_while_a_whole_gpu_trial_waits() -> None:
    gpu_node(gpus=1)
    user = UserFactory(team=TeamFactory(gpu_quota=4))
    halves = [submit(user, gpu_fraction=0.5).json()["id"] for _ in range(2)]
    whole = submit(user, gpus_per_worker=1).json()["id"]
    third = submit(user, gpu_fraction=0.5).json()["id"]

    assert scheduler_pass() == 2
    (first,), (second,) = held(halves[0]), held(halves[1])
    assert first == second == (Device.objects.get(kind="gpu").pk, 500)
    waiting = Experiment.objects.get(pk=whole)
    assert waiting.state == "queued"
    assert waiting.pending_reason.startswith(
        "Needs 1 GPUs on one node; the largest free block is 0")
    assert Experiment.objects.get(pk=third).pending_reason == (
        "Needs 0.5 of a GPU for each worker; no GPU has that much room free (a GPU held whole is "
        "not shared).")

    # Both halves end: the GPU is free whole again and the whole-GPU trial gets it.
    Allocation.objects.filter(trial__experiment_id__in=halves).update(released_at=timezone.now())
    Experiment.objects.filter(pk__in=halves).update(state="completed")
    Trial.objects.filter(experiment_id__in=halves).update(state="completed")
    assert scheduler_pass() == 1
    assert held(whole) == [(Device.objects.get(kind="gpu").pk, 1000)]


def submit_at(user: Any, *, priority: int, **resources: Any) -> int:
    response = api(user).post("/api/v1/experiments/", {
        "name": "shared", "model": "mlp", "dataset": "digits", "priority": priority,
        "resources": {"workers": 1, **resources},
    }, format="json")
    assert response.status_code == 201, response.json()
    return int(response.json()["id"])


def stop_reasons(*ids: int) -> list[str]:
    return [Trial.objects.get(experiment_id=pk).stop_reason for pk in ids]


def test_a_higher_priority_whole_gpu_job_preempts_every_sharer_of_a_gpu() -> None:
    gpu_node(gpus=1)
    user = UserFactory(team=TeamFactory(gpu_quota=4))
    halves = [submit_at(user, priority=0, gpu_fraction=0.5) for _ in range(2)]
    assert scheduler_pass() == 2
    whole = submit_at(user, priority=5, gpus_per_worker=1)
    assert scheduler_pass() == 0
    assert stop_reasons(*halves) == ["preempted", "preempted"]
    assert "preempt" in Experiment.objects.get(pk=whole).pending_reason.lower()

    Allocation.objects.filter(trial__experiment_id__in=halves).update(released_at=timezone.now())
    Trial.objects.filter(experiment_id__in=halves).update(state="canceled")
    Experiment.objects.filter(pk__in=halves).update(state="queued")
    assert scheduler_pass() == 1
    assert held(whole) == [(Device.objects.get(kind="gpu").pk, 1000)]


def test_a_shared_gpu_one_sharer_outranks_is_not_taken_from_the_others() -> None:
    gpu_node(gpus=1)
    user = UserFactory(team=TeamFactory(gpu_quota=4))
    low = submit_at(user, priority=0, gpu_fraction=0.5)
    high = submit_at(user, priority=9, gpu_fraction=0.5)
    assert scheduler_pass() == 2
    submit_at(user, priority=5, gpus_per_worker=1)
    scheduler_pass()
    # Stopping the lower one would not free the GPU: nobody is stopped for nothing.
    assert stop_reasons(low, high) == ["", ""]


def test_a_gpu_held_whole_is_never_shared() -> None:
    gpu_node(gpus=1)
    user = UserFactory(team=TeamFactory(gpu_quota=4))
    whole = submit(user, gpus_per_worker=1).json()["id"]
    assert scheduler_pass() == 1
    half = submit(user, gpu_fraction=0.5).json()["id"]
    assert scheduler_pass() == 0
    assert held(half) == [] and len(held(whole)) == 1


def test_quotas_count_shares_as_their_part() -> None:
    gpu_node(gpus=2)
    team = TeamFactory(gpu_quota=1)
    user = UserFactory(team=team)
    ids = [submit(user, gpu_fraction=0.5).json()["id"] for _ in range(3)]
    assert scheduler_pass() == 2
    assert Experiment.objects.get(pk=ids[2]).pending_reason == (
        "Team quota of 1 GPUs: 1 in use, this needs 0.5.")
    client = Client()
    client.force_login(user)
    assert "1</strong> of 1 GPU" in client.get("/experiments/new/").content.decode()


@pytest.mark.parametrize(("resources", "text"), [
    ({"gpu_fraction": 1.5}, "gpu_fraction must be above 0 and below 1"),
    ({"gpu_fraction": 0}, None),  # no share: a CPU worker
    ({"gpu_fraction": -0.5}, "gpu_fraction must be above 0 and below 1"),
    ({"gpu_fraction": 0.0001}, "between 0.001 and 0.999"),
    ({"gpu_fraction": 0.5, "gpus_per_worker": 1}, "ask for it alone"),
    ({"gpu_fraction": 0.5, "gpu_memory_mb": 1024}, "ask for it alone"),
    ({"gpu_memory_mb": 1024, "gpus_per_worker": 1}, "not both"),
    ({"gpu_memory_mb": 1024}, "1024 MB of one GPU's memory, no GPU's memory is known"),
    ({"gpu_fraction": "half"}, "A valid number is required"),
])
def test_a_share_that_could_never_run_is_refused_on_resources(
    resources: dict[str, Any], text: str | None,
) -> None:
    gpu_node(gpus=1)  # an emulated slot: its memory is unknown
    response = submit(UserFactory(), **resources)
    if text is None:
        assert response.status_code == 201, response.json()
        return
    assert response.status_code == 400
    body = response.json()
    shown = body["error"] if "resources" not in body or body["error"] != "Invalid input." \
        else str(body["resources"])
    assert text in shown, body


def test_an_amount_of_memory_on_real_gpus_gets_that_limit_and_its_part(
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(gpu_mps=True)
    gpu_node(gpus=1, memory_gib=16)
    response = submit(UserFactory(), gpu_memory_mb=4096)
    assert response.status_code == 201, response.json()
    assert response.json()["resources"]["gpu_memory_mb"] == 4096
    assert scheduler_pass() == 1
    trial = Trial.objects.get()
    assert held(trial.experiment_id)[0][1] == 250
    resources = trial_spec_build(trial=trial).resources
    assert (resources.gpus_per_worker, resources.gpu_share_milli, resources.gpu_memory_limit_mb,
            resources.gpus_physical, resources.gpu_mps) == (1, 250, 4096, True, True)


def test_a_fraction_on_a_real_gpu_is_limited_to_its_part_of_the_memory() -> None:
    gpu_node(gpus=1, memory_gib=16)
    assert submit(UserFactory(), gpu_fraction=0.25).status_code == 201
    assert scheduler_pass() == 1
    resources = trial_spec_build(trial=Trial.objects.get()).resources
    assert (resources.gpu_share_milli, resources.gpu_memory_limit_mb) == (250, 4096)


def test_showback_counts_a_share_of_gpu_time() -> None:
    node = gpu_node(gpus=1)
    owner = UserFactory()
    for _ in range(2):
        assert submit(owner, gpu_fraction=0.5).status_code == 201
    assert scheduler_pass() == 2
    for trial in Trial.objects.all():
        allocations_claim_part(trial_id=trial.pk, node_id=node.pk)
    later = timezone.now() + timedelta(hours=1)
    query = usage_query(today=later.astimezone(UTC).date(), group_by=("experiment",))
    rows = usage_report(viewer=owner, query=query, now=later)
    assert len(rows) == 2
    for row in rows:
        assert row.gpu_seconds == pytest.approx(1800, rel=0.01)  # half of an hour


def test_the_cluster_page_shows_each_holder_of_a_shared_gpu_with_its_part() -> None:
    gpu_node(gpus=1)
    user = UserFactory()
    for _ in range(2):
        assert submit(user, gpu_fraction=0.5).status_code == 201
    assert scheduler_pass() == 2
    client = Client()
    client.force_login(UserFactory(is_staff=True))
    html = client.get("/cluster/").content.decode()
    assert html.count("50 % of it</span>") == 2


def test_a_workspace_may_ask_for_a_share_and_its_session_holds_it() -> None:
    gpu_node(gpus=1)
    response = api(UserFactory()).post("/api/v1/workspaces/", {"name": "lab",
                                                              "gpu_fraction": 0.25},
                                       format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["gpu_fraction"] == 0.25
    assert scheduler_pass() == 1
    session = Experiment.objects.get(kind=Experiment.Kind.WORKSPACE)
    assert held(session.pk)[0][1] == 250
    assert trial_spec_build(trial=session.trials.get()).resources.gpus_per_worker == 1


def test_a_search_gives_its_trials_the_share() -> None:
    gpu_node(gpus=1)
    response = api(UserFactory()).post("/api/v1/searches/", {
        "name": "sweep", "model": "mlp", "dataset": "digits", "searcher": "random",
        "space": {"learning_rate": {"low": 0.001, "high": 0.1, "log": True}},
        "max_trials": 2, "max_concurrent": 2, "resources": {"gpu_fraction": 0.5},
    }, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["resources"]["gpu_fraction"] == 0.5
    assert scheduler_pass() == 2
    assert {share for e in Experiment.objects.all() for _, share in held(e.pk)} == {500}


def test_the_forms_offer_shares_and_a_workspace_form_starts_one() -> None:
    gpu_node(gpus=1)
    client = Client()
    client.force_login(UserFactory())
    assert '<option value="0.5">½ of a GPU</option>' in client.get(
        "/experiments/new/").content.decode()
    response = client.post("/workspaces/", {"name": "lab", "gpus": 0, "cpu_slots": 1,
                                            "gpu_fraction": "0.5", "priority": 0})
    assert response.status_code == 302, response.content.decode()[-2000:]
    session = Experiment.objects.get(kind=Experiment.Kind.WORKSPACE)
    assert (session.gpu_milli, session.gpu_memory_mb) == (500, 0)
    assert "50 % of a GPU" in client.get("/workspaces/").content.decode()
