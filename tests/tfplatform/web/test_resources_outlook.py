"""What is free right now, and whether a request of a given size could start: selector and panel."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from tests.factories import (
    DeviceFactory,
    ExperimentFactory,
    NodeFactory,
    TeamFactory,
    UserFactory,
    node_with_gpus,
)
from tfplatform.cluster.models import Device, Node
from tfplatform.cluster.selectors import capacity_now, resources_fit, team_quota
from tfplatform.experiments.selectors.scheduling import experiments_queued_ahead
from tfplatform.experiments.services.scheduling import scheduler_pass

pytestmark = pytest.mark.django_db


def cluster() -> None:
    """Two ready nodes (3 and 1 GPUs, a CPU slot each) and nodes whose devices do not count."""
    big, small = NodeFactory(hostname="big"), NodeFactory(hostname="small")
    for index in range(3):
        DeviceFactory(node=big, kind="gpu", index=index)
    DeviceFactory(node=small, kind="gpu", index=0)
    DeviceFactory(node=big, kind="cpu", index=0)
    DeviceFactory(node=small, kind="cpu", index=0)
    DeviceFactory(node=NodeFactory(state=Node.State.CORDONED), kind="gpu", index=0)
    silent = NodeFactory(last_heartbeat=timezone.now() - timedelta(hours=1))
    DeviceFactory(node=silent, kind="gpu", index=0)


def fit(**shape: int) -> str:
    resources = {"workers": 1, "gpus_per_worker": 0, "parameter_servers": 0, **shape}
    team = UserFactory(team=TeamFactory(gpu_quota=4)).team
    result = resources_fit(capacity=capacity_now(), quota=team_quota(team_id=team.pk), **resources)
    return ("yes: " if result.could_start else "no: ") + result.message


def test_capacity_counts_only_free_devices_on_nodes_accepting_work() -> None:
    cluster()
    ExperimentFactory(gpus_per_worker=2)  # best fit: takes 2 of big's 3 GPUs
    assert scheduler_pass() == 1
    capacity = capacity_now()
    assert (capacity.nodes, capacity.gpus_total, capacity.gpus_free) == (2, 4, 2)
    assert (capacity.cpu_slots_total, capacity.cpu_slots_free) == (2, 2)
    assert capacity.gpu_nodes_free == 2 and capacity.largest_gpu_block == 1
    assert capacity.largest_gpu_node == 3


def test_fit_follows_the_schedulers_placement_rules() -> None:
    cluster()
    assert fit(gpus_per_worker=3) == "yes: Fits on free devices: it could start right away."
    assert fit(workers=2, gpus_per_worker=1, parameter_servers=1).startswith("yes")
    assert fit(gpus_per_worker=4) == (
        "no: Never fits the cluster as it is: a worker needs 4 GPUs on one node, the largest has 3."
    )
    assert fit(workers=3) == (
        "no: Never fits the cluster as it is: it needs 3 CPU slots, the cluster has 2."
    )
    assert fit(workers=3, gpus_per_worker=2).startswith("no: Never fits")
    ExperimentFactory(gpus_per_worker=2)
    assert scheduler_pass() == 1
    assert fit(gpus_per_worker=3) == (
        "no: Needs 3 GPUs on one node; the largest free block is 1. "
        "It would queue until devices free up."
    )
    ExperimentFactory(gpus_per_worker=3)  # waits: a new one would queue behind it
    scheduler_pass()
    ahead = experiments_queued_ahead(priority=0)
    assert ahead == 1 and experiments_queued_ahead(priority=1) == 0
    result = resources_fit(
        capacity=capacity_now(),
        quota=None,
        workers=1,
        gpus_per_worker=1,
        parameter_servers=0,
        queued_ahead=ahead,
    )
    assert result.could_start and result.message == (
        "Fits on free devices now; 1 queued experiment of equal or higher priority may go first."
    )


def test_fit_respects_the_team_quota() -> None:
    cluster()
    team = TeamFactory(name="vision", gpu_quota=3)
    ExperimentFactory(owner=UserFactory(team=team), gpus_per_worker=2)
    assert scheduler_pass() == 1
    quota = team_quota(team_id=team.pk)
    assert quota is not None and (quota.gpus_in_use, quota.gpu_quota) == (2, 3)
    capacity = capacity_now()
    wait = resources_fit(
        capacity=capacity, quota=quota, workers=1, gpus_per_worker=2, parameter_servers=0
    )
    assert not wait.could_start and "holds 2 of its 3 GPUs" in wait.message
    never = resources_fit(
        capacity=capacity, quota=quota, workers=4, gpus_per_worker=1, parameter_servers=0
    )
    assert never.message == "Needs 4 GPUs, more than your team's quota of 3."
    assert team_quota(team_id=None) is None

    # With a limit above its quota the team may borrow what is idle, and the panel says so.
    team.gpu_limit = 4
    team.save(update_fields=["gpu_limit"])
    quota = team_quota(team_id=team.pk)
    borrow = resources_fit(capacity=capacity, quota=quota, workers=2, gpus_per_worker=1,
                           parameter_servers=0)
    assert borrow.could_start and borrow.message.startswith(
        "Fits on idle devices, beyond your team's guarantee of 3 GPUs: it would borrow them")
    never = resources_fit(capacity=capacity, quota=quota, workers=1, gpus_per_worker=3,
                          parameter_servers=0)
    assert never.message == "Your team holds 2 of its 4 GPUs; it would wait until enough of " \
        "them are released."


def test_no_node_online() -> None:
    result = resources_fit(
        capacity=capacity_now(), quota=None, workers=1, gpus_per_worker=0, parameter_servers=0
    )
    assert not result.could_start and "No worker node is online" in result.message


def test_form_panel_updates_for_the_size_typed_and_refuses_bad_numbers() -> None:
    cluster()
    client = Client()
    client.force_login(UserFactory(team=TeamFactory(name="nlp", gpu_quota=2)))
    page = client.get("/experiments/new/").content.decode()
    assert "<strong>4</strong> of 4 GPUs free on 2 nodes, largest block 3 on one node" in page
    assert "<strong>2</strong> of 2 CPU slots free" in page
    assert "Team nlp: <strong>0</strong> of 2 GPUs in use" in page
    fits = client.get(
        "/experiments/new/fit/",
        {"workers": 1, "gpus_per_worker": 2, "parameter_servers": 0, "priority": 0},
    )
    assert fits.status_code == 200 and "fit-yes" in fits.content.decode()
    over = client.get(
        "/experiments/new/fit/",
        {"workers": 1, "gpus_per_worker": 3, "parameter_servers": 0, "priority": 0},
    )
    assert "more than your team&#x27;s quota of 2" in over.content.decode()
    bad = client.get(
        "/experiments/new/fit/",
        {"workers": 0, "gpus_per_worker": "x", "parameter_servers": 0, "priority": 0},
    )
    assert bad.status_code == 400
    html = bad.content.decode()
    assert "Fix the resource fields" in html and "Enter a whole number" in html
    assert "<html" not in html
    assert Client().get("/experiments/new/fit/").status_code == 302


def outlook(**params: object) -> tuple[int, str]:
    """The panel as the form's fields typed so far fetch it."""
    client = Client()
    client.force_login(UserFactory(team=TeamFactory(gpu_quota=8)))
    response = client.get("/experiments/new/fit/", {
        "workers": 1, "gpus_per_worker": 0, "parameter_servers": 0, "priority": 0, **params})
    return response.status_code, response.content.decode()


def test_two_half_shares_fit_on_one_gpu_while_a_third_waits() -> None:
    node_with_gpus(gpus=1)
    assert fit(gpu_milli=500) == "yes: Fits on a shared GPU: it could start right away."
    ExperimentFactory(gpu_milli=500)
    assert scheduler_pass() == 1
    capacity = capacity_now()
    assert capacity.gpus_free == 0 and capacity.share_room_text == "0.5 of a GPU"
    assert fit(gpu_milli=500) == "yes: Fits on a shared GPU: it could start right away."
    assert fit(gpu_milli=750).startswith("no: Needs 0.75 of a GPU for each worker")
    assert fit(workers=2, gpu_milli=500) == "no: Needs 0.5 of a GPU for each worker; no GPU has " \
        "that much room free (a GPU held whole is not shared). It would queue until devices " \
        "free up."
    ExperimentFactory(gpu_milli=500)
    assert scheduler_pass() == 1
    assert fit(gpu_milli=500) == "no: Needs 0.5 of a GPU for each worker; no GPU has that much " \
        "room free (a GPU held whole is not shared). It would queue until devices free up."
    assert fit(workers=3, gpu_milli=500) == "no: Never fits the cluster as it is: its 3 workers " \
        "need 0.5 of a GPU each, the cluster's GPUs hold 2."
    status, html = outlook(gpu_fraction="0.5")
    assert status == 200 and "no GPU has that much room free" in html
    assert "1 GPU shared, the most room left on one: none" in html


def test_a_share_never_goes_onto_a_gpu_a_whole_gpu_holder_has() -> None:
    node_with_gpus(gpus=2)
    ExperimentFactory(gpus_per_worker=1)
    assert scheduler_pass() == 1
    ExperimentFactory(gpu_milli=750)
    assert scheduler_pass() == 1
    # The whole holder's GPU has all its room unused, yet only the shared one's 0.25 counts.
    assert fit(gpu_milli=500).startswith("no: Needs 0.5 of a GPU for each worker; no GPU has")
    assert fit(gpu_milli=250) == "yes: Fits on a shared GPU: it could start right away."
    status, html = outlook(gpu_fraction="0.5")
    assert status == 200 and "fit-no" in html and "a GPU held whole is not shared" in html
    assert outlook(gpu_fraction="0.25")[1].count("Fits on a shared GPU") == 1


def test_a_share_of_memory_larger_than_any_gpus_never_fits() -> None:
    node = NodeFactory()
    DeviceFactory(node=node, kind=Device.Kind.GPU, index=0, emulated=False,
                  memory_bytes=16 * 2**30)
    assert fit(gpu_memory_mb=4096) == "yes: Fits on a shared GPU: it could start right away."
    assert fit(gpu_memory_mb=200000) == (
        "no: Never fits the cluster as it is: a worker needs 200000 MB of one GPU's memory, the "
        "largest has 16384 MB (emulated slots have none).")
    status, html = outlook(gpu_memory_mb=200000)
    assert status == 200 and "Never fits the cluster as it is" in html and "200000 MB" in html


def test_an_elastic_range_starts_smaller_when_its_largest_does_not_fit() -> None:
    node_with_gpus(gpus=4)
    ExperimentFactory(gpus_per_worker=2)
    assert scheduler_pass() == 1
    assert fit(gpus_per_worker=4, gpus_per_worker_min=1) == (
        "yes: Could start now at 2 GPUs of its 4 (elastic); it grows when devices free up.")
    assert fit(workers=4, gpus_per_worker=1, workers_min=1) == (
        "yes: Could start now at 2 workers of its 4 (elastic); it grows when devices free up.")
    assert fit(gpus_per_worker=2, gpus_per_worker_min=1) == (
        "yes: Fits on free devices: it could start right away.")  # its largest fits: as today
    # The team's quota still applies to each size: 1 of its 2 GPUs in use leaves room for 1.
    team = TeamFactory(gpu_quota=2)
    ExperimentFactory(owner=UserFactory(team=team), gpus_per_worker=1)
    assert scheduler_pass() == 1
    result = resources_fit(capacity=capacity_now(), quota=team_quota(team_id=team.pk),
                           workers=1, gpus_per_worker=4, parameter_servers=0,
                           gpus_per_worker_min=1)
    assert result.could_start and result.message == (
        "Could start now at 1 GPU of its 4 (elastic); it grows when devices free up.")
    status, html = outlook(gpus_per_worker=4, min_gpus_per_worker=1)
    assert status == 200 and "Could start now at 1 GPU of its 4 (elastic)" in html


def test_an_elastic_range_whose_smallest_size_never_fits_says_so() -> None:
    node_with_gpus(gpus=1)
    node_with_gpus(gpus=1)
    assert fit(gpus_per_worker=4, gpus_per_worker_min=2) == (
        "no: Never fits the cluster as it is, not even at its smallest size, 2 GPUs: a worker "
        "needs 2 GPUs on one node, the largest has 1.")
    status, html = outlook(gpus_per_worker=4, min_gpus_per_worker=2)
    assert status == 200 and "not even at its smallest size, 2 GPUs" in html
    for _ in range(2):
        ExperimentFactory(gpus_per_worker=1)
    assert scheduler_pass() == 2
    assert fit(workers=2, gpus_per_worker=1, workers_min=1) == (
        "no: No size of its range could start now; at its smallest, 1 worker: Needs 1 GPUs on "
        "one node; the largest free block is 0. It would queue until devices free up.")


BAD_INPUT: list[tuple[dict[str, object], str]] = [
    ({"gpus_per_worker": 2, "min_gpus_per_worker": 4},
     "min_gpus_per_worker must be between 1 and the largest size, 2."),
    ({"workers": 2, "min_workers": "x"}, "Enter a whole number."),
    ({"workers": 2, "min_workers": 1, "gpus_per_worker": 2, "min_gpus_per_worker": 1},
     "Give a range of workers or of GPUs per worker, not both."),
    ({"workers": 2, "min_workers": 1, "gpu_fraction": "0.5"},
     "A share of a GPU cannot be elastic."),
    ({"workers": 2, "min_workers": 1, "parameter_servers": 1},
     "Parameter-server training cannot be elastic."),
    ({"gpus_per_worker": 1, "gpu_fraction": "0.5"}, "ask for it alone"),
    ({"gpus_per_worker": 1, "gpu_memory_mb": 1024}, "not both"),
    ({"gpu_fraction": "1.5"}, "Select a valid choice. 1.5 is not one of the available choices."),
    ({"gpu_memory_mb": "lots"}, "Enter a whole number."),
]


def test_bad_share_or_range_input_is_a_400_with_a_message() -> None:
    node_with_gpus(gpus=2)
    for params, text in BAD_INPUT:
        status, html = outlook(**params)
        assert status == 400 and "Fix the resource fields" in html and text in html, (params, html)
