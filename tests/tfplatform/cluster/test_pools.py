"""Node pools and GPU types: nodes say what they are, requests ask for them, the scheduler keeps
them there (preemption and reservations included), and the pages and the API show them."""

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import DeviceFactory, NodeFactory, TeamFactory, UserFactory
from tfplatform.cluster.discovery import DeviceInfo
from tfplatform.cluster.models import Allocation, Device, Node
from tfplatform.cluster.services import node_register
from tfplatform.core.errors import InvalidInput
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.experiments.services.transitions import experiment_transition

pytestmark = pytest.mark.django_db

A100 = "NVIDIA A100-SXM4-80GB"
T4 = "Tesla T4"


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def gpu_node(*, pool: str, gpu_type: str, gpus: int, hostname: str | None = None) -> Node:
    node = NodeFactory(pool=pool, gpu_type=gpu_type, **({"hostname": hostname} if hostname else {}))
    for index in range(gpus):
        DeviceFactory(node=node, kind=Device.Kind.GPU, index=index)
    DeviceFactory(node=node, kind=Device.Kind.CPU, index=0)
    return node


def submit(user: Any, **resources: Any) -> Any:
    return api(user).post("/api/v1/experiments/", {
        "name": "pooled", "model": "mlp", "dataset": "digits",
        "resources": {"workers": 1, "gpus_per_worker": 1, **resources},
    }, format="json")


def nodes_of(experiment_id: int) -> set[str]:
    return set(Allocation.objects.filter(trial__experiment_id=experiment_id)
               .values_list("node__pool", flat=True))


def gpu_info(index: int, name: str) -> DeviceInfo:
    return DeviceInfo(kind="gpu", index=index, name=name, uuid=f"GPU-{index}")


def test_a_node_registers_its_pool_labels_and_nvmls_gpu_name_unless_one_is_configured() -> None:
    found = node_register(hostname="g1", cpu_count=8, memory_bytes=0, trial_runtime="sandbox",
                          devices=[gpu_info(0, A100), gpu_info(1, A100)], pool="a100",
                          labels=("zone=eu-1", "rack=r7"))
    assert (found.pool, found.gpu_type, found.labels) == (
        "a100", A100, {"zone": "eu-1", "rack": "r7"})
    found = node_register(hostname="g1", cpu_count=8, memory_bytes=0, trial_runtime="sandbox",
                          devices=[gpu_info(0, A100)], pool="a100", gpu_type="a100-80g")
    assert (found.gpu_type, found.labels) == ("a100-80g", {})
    emulated = DeviceInfo(kind="gpu", index=0, name="emulated accelerator slot 0", emulated=True)
    found = node_register(hostname="e1", cpu_count=2, memory_bytes=0, trial_runtime="sandbox",
                          devices=[emulated])
    assert (found.pool, found.gpu_type) == ("default", "")


@pytest.mark.parametrize(("pool", "labels", "field"), [
    ("GPU Pool", (), "pool"), ("-a", (), "pool"), ("a" * 64, (), "pool"),
    ("a100", ("novalue",), "labels"), ("a100", ("bad key=x",), "labels"),
    ("a100", ("k=" + "v" * 64,), "labels"),
])
def test_a_malformed_pool_or_label_keeps_the_node_out(pool: str, labels: tuple[str, ...],
                                                      field: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        node_register(hostname="bad", cpu_count=1, memory_bytes=0, trial_runtime="sandbox",
                      devices=[], pool=pool, labels=labels)
    assert raised.value.field == field
    assert not Node.objects.filter(hostname="bad").exists()


def test_a_gpu_type_only_one_pool_has_runs_there_and_waits_there_when_it_is_full() -> None:
    gpu_node(pool="a100", gpu_type=A100, gpus=1, hostname="big-1")
    gpu_node(pool="t4", gpu_type=T4, gpus=4)
    user = UserFactory(team=TeamFactory(gpu_quota=8))
    first = submit(user, gpu_type="nvidia a100-sxm4-80gb")  # types match without case
    assert first.status_code == 201, first.json()
    assert first.json()["resources"]["gpu_type"] == "nvidia a100-sxm4-80gb"
    second = submit(user, gpu_type=A100)
    anywhere = submit(user)

    assert scheduler_pass() == 2
    assert nodes_of(first.json()["id"]) == {"a100"}
    assert nodes_of(anywhere.json()["id"]) == {"t4"}
    waiting = Experiment.objects.get(pk=second.json()["id"])
    assert waiting.state == "queued"
    assert waiting.pending_reason.startswith(
        f"Needs 1 GPUs on one node; the largest free block is 0 (GPU type '{A100}').")


def test_a_pool_that_is_offline_says_so() -> None:
    gpu_node(pool="t4", gpu_type=T4, gpus=1)
    gpu_node(pool="a100", gpu_type=A100, gpus=1)
    Node.objects.filter(pool="a100").update(state=Node.State.CORDONED)
    response = submit(UserFactory(), pool="a100")
    assert response.status_code == 201  # cordoned: it may come back
    assert scheduler_pass() == 0
    assert Experiment.objects.get().pending_reason.startswith(
        "No worker node of pool 'a100' is online and accepting work.")


@pytest.mark.parametrize(("resources", "field_text"), [
    ({"pool": "h100"}, "no node is in pool 'h100'; the pools are a100, t4"),
    ({"gpu_type": "H100"}, "no node has GPUs of type 'H100'; the types are "
                           f"'{A100}', '{T4}'"),
    ({"pool": "t4", "gpu_type": A100},
     f"no node in pool 't4' has GPUs of type '{A100}'; the types in pool 't4' are '{T4}'"),
    ({"pool": "a100", "gpus_per_worker": 2},
     "a worker needs 2 GPUs on one node, the largest has 1 (nodes of pool 'a100')"),
    ({"gpus_per_worker": 0, "gpu_type": T4}, "A GPU type is asked for with GPUs"),
    ({"pool": "Not A Pool"}, "is not a pool name"),
])
def test_a_request_no_node_of_its_pool_or_type_can_hold_is_refused(
    resources: dict[str, Any], field_text: str,
) -> None:
    gpu_node(pool="a100", gpu_type=A100, gpus=1)
    gpu_node(pool="t4", gpu_type=T4, gpus=4)
    response = submit(UserFactory(team=TeamFactory(gpu_quota=8)), **resources)
    assert response.status_code == 400
    body = response.json()
    assert field_text in body["error"] and body["resources"] == [body["error"]]
    assert not Experiment.objects.exists()


def test_preemption_for_a_pool_stops_only_trials_in_that_pool() -> None:
    gpu_node(pool="a100", gpu_type=A100, gpus=1)
    gpu_node(pool="t4", gpu_type=T4, gpus=1)
    low = UserFactory(team=TeamFactory(gpu_quota=8))
    in_a100 = submit(low, pool="a100").json()["id"]
    in_t4 = submit(low, pool="t4").json()["id"]
    assert scheduler_pass() == 2
    for pk in (in_a100, in_t4):
        experiment_transition(experiment=Experiment.objects.get(pk=pk), to="running")

    urgent = api(UserFactory(is_staff=True)).post("/api/v1/experiments/", {
        "name": "urgent", "model": "mlp", "dataset": "digits", "priority": 50,
        "resources": {"workers": 1, "gpus_per_worker": 1, "pool": "t4"},
    }, format="json")
    assert urgent.status_code == 201, urgent.json()
    scheduler_pass()
    stopped = set(Trial.objects.filter(stop_reason="preempted")
                  .values_list("experiment_id", flat=True))
    assert stopped == {in_t4}


def test_each_pool_has_its_own_head_reservation() -> None:
    gpu_node(pool="a100", gpu_type=A100, gpus=2)
    gpu_node(pool="t4", gpu_type=T4, gpus=2)
    user = UserFactory(team=TeamFactory(gpu_quota=16))
    for pool in ("a100", "t4"):
        assert submit(user, pool=pool).status_code == 201
    assert scheduler_pass() == 2
    Experiment.objects.update(state="running")
    heads = [submit(user, pool=pool, gpus_per_worker=2).json()["id"] for pool in ("a100", "t4")]
    assert scheduler_pass() == 0
    for pk in heads:
        reason = Experiment.objects.get(pk=pk).pending_reason
        assert "It has a reservation on" in reason, reason


def test_the_cluster_page_groups_nodes_by_pool_and_the_api_shows_pool_type_and_labels() -> None:
    gpu_node(pool="t4", gpu_type=T4, gpus=1, hostname="t4-box")
    node = gpu_node(pool="a100", gpu_type=A100, gpus=1, hostname="a100-box")
    Node.objects.filter(pk=node.pk).update(labels={"zone": "eu-1"})
    staff = UserFactory(is_staff=True)
    client = Client()
    client.force_login(staff)
    html = client.get("/cluster/").content.decode()
    assert html.index('id="pool-a100"') < html.index("a100-box") < html.index('id="pool-t4"')
    assert html.index('id="pool-t4"') < html.index("t4-box")
    assert "<code>zone=eu-1</code>" in html and A100 in html

    nodes = {n["hostname"]: n for n in api(staff).get("/api/v1/nodes/").json()["results"]}
    assert nodes["a100-box"]["pool"] == "a100"
    assert nodes["a100-box"]["gpu_type"] == A100
    assert nodes["a100-box"]["labels"] == {"zone": "eu-1"}


def test_the_forms_offer_the_registered_pools_and_gpu_types() -> None:
    gpu_node(pool="a100", gpu_type=A100, gpus=1)
    client = Client()
    client.force_login(UserFactory())
    for page in ("/experiments/new/", "/workspaces/"):
        html = client.get(page).content.decode()
        assert '<option value="a100">a100</option>' in html, page
        assert f'<option value="{A100}">{A100}</option>' in html, page


def test_a_workspace_asks_for_a_pool_and_its_sessions_run_there() -> None:
    gpu_node(pool="a100", gpu_type=A100, gpus=1)
    gpu_node(pool="t4", gpu_type=T4, gpus=1)
    response = api(UserFactory()).post("/api/v1/workspaces/", {
        "name": "lab", "gpus": 1, "pool": "t4", "gpu_type": T4}, format="json")
    assert response.status_code == 201, response.json()
    assert (response.json()["pool"], response.json()["gpu_type"]) == ("t4", T4)
    assert scheduler_pass() == 1
    session = Experiment.objects.get(kind=Experiment.Kind.WORKSPACE)
    assert nodes_of(session.pk) == {"t4"}
