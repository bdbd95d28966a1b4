"""/metrics as Prometheus reads it (prometheus-client's own parser), after a known state made
with factories: the platform's series with their labels and values, and who may scrape."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from tests.factories import (
    DeviceFactory,
    ExperimentFactory,
    MetricFactory,
    NodeFactory,
    TeamFactory,
    TrialFactory,
    UserFactory,
)
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.cluster.models import Allocation, Node
from tfplatform.cluster.placement import PREEMPTED
from tfplatform.experiments.models import Experiment, Trial

pytestmark = pytest.mark.django_db
TOKEN = "a-metrics-token-of-some-length"
QUEUED = Experiment.State.QUEUED


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def value(found: dict, name: str, **labels: str) -> float:
    matches = [v for got, v in found.get(name, [])
               if all(got.get(k) == x for k, x in labels.items())]
    assert len(matches) == 1, (name, labels, found.get(name))
    return matches[0]


@pytest.fixture(autouse=True)
def metrics_token(settings: object, platform_settings_override: PlatformSettingsOverride) -> str:
    platform_settings_override(metrics_token=TOKEN)
    return TOKEN


def scrape(client: Client, **headers: str) -> str:
    answer = client.get("/metrics", **{"HTTP_AUTHORIZATION": f"Bearer {TOKEN}", **headers})
    assert answer.status_code == 200, answer.content[:300]
    assert answer["Content-Type"].startswith("text/plain")
    return answer.content.decode()


@pytest.fixture
def state() -> dict[str, object]:
    """Two teams with queued experiments and reasons, GPUs held, preemptions and outcomes."""
    vision, speech = TeamFactory(name="vision", gpu_quota=4), TeamFactory(name="speech",
                                                                          gpu_quota=2)
    ada, bob = UserFactory(username="ada", team=vision), UserFactory(username="bob", team=speech)
    for reason in ("Team quota of 4 GPUs: 4 in use, this needs 2. Queue position 1.",
                   "Team quota of 4 GPUs: 4 in use, this needs 1. Queue position 2.",
                   "Needs 2 GPUs on one node; the largest free block is 1. Queue position 3."):
        ExperimentFactory(owner=ada, state=QUEUED, pending_reason=reason)
    ExperimentFactory(owner=bob, state=QUEUED,
                      pending_reason="Preempted; resumes from its last checkpoint.")
    ExperimentFactory(owner=bob, state=QUEUED, pending_reason="Something new entirely.")
    NodeFactory(state=Node.State.CORDONED)
    node = NodeFactory(hostname="gpu-1")
    gpus = [DeviceFactory(node=node, index=i) for i in range(3)]
    now = timezone.now()
    running = ExperimentFactory(owner=ada, state=Experiment.State.RUNNING, gpus_per_worker=2)
    Experiment.objects.filter(pk=running.pk).update(created_at=now - timedelta(seconds=100))
    trial = TrialFactory(experiment=running, restart_count=0, state=Trial.State.RUNNING,
                         started_at=now - timedelta(seconds=40))
    for gpu in gpus[:2]:
        Allocation.objects.create(holder=trial, node=node, device=gpu)
    MetricFactory(trial=trial, name="images_per_sec", value=111.0,
                  recorded_at=now - timedelta(seconds=20))
    MetricFactory(trial=trial, name="images_per_sec", value=250.5, recorded_at=now)
    # bob's restarted experiment: waited 30 s after its preempted first trial ended (that one
    # started before the window).
    resumed = ExperimentFactory(owner=bob, state=Experiment.State.RUNNING, gpus_per_worker=1)
    TrialFactory(experiment=resumed, restart_count=0, state=Trial.State.CANCELED,
                 stop_reason=PREEMPTED, started_at=now - timedelta(hours=2),
                 finished_at=now - timedelta(seconds=60))
    second = TrialFactory(experiment=resumed, restart_count=1, state=Trial.State.RUNNING,
                          started_at=now - timedelta(seconds=30))
    Allocation.objects.create(holder=second, node=node, device=gpus[2])
    done = ExperimentFactory(owner=ada, state=Experiment.State.FAILED)
    TrialFactory(experiment=done, restart_count=0, state=Trial.State.COMPLETED)
    TrialFactory(experiment=done, restart_count=1, state=Trial.State.FAILED)
    TrialFactory(experiment=done, restart_count=2, state=Trial.State.CANCELED,
                 stop_reason=PREEMPTED)
    TrialFactory(experiment=done, restart_count=3, state=Trial.State.CANCELED)
    TrialFactory(experiment=done, restart_count=4, state=Trial.State.CANCELED,
                 stop_reason="resized")
    return {"running": running, "trial": trial, "second": second, "resumed": resumed,
            "gpus": gpus}


def test_platform_series_have_the_state_s_labels_and_values(
    client: Client, state: dict, settings: object
) -> None:
    found = samples(scrape(client))
    assert value(found, "tfplatform_queue_length") == 5
    assert value(found, "tfplatform_pending_experiments", team="vision", reason="quota") == 2
    assert value(found, "tfplatform_pending_experiments", team="vision", reason="gpus") == 1
    assert value(found, "tfplatform_pending_experiments", team="speech", reason="preempted") == 1
    assert value(found, "tfplatform_pending_experiments", team="speech", reason="other") == 1

    assert value(found, "tfplatform_team_gpus_allocated", team="vision") == 2
    assert value(found, "tfplatform_team_gpus_allocated", team="speech") == 1
    assert value(found, "tfplatform_team_gpu_quota", team="vision") == 4
    assert value(found, "tfplatform_team_gpu_quota", team="speech") == 2

    assert value(found, "tfplatform_preemptions_total", team="speech") == 1
    assert value(found, "tfplatform_preemptions_total", team="vision") == 1
    for outcome, count in {"completed": 1, "failed": 1, "canceled": 1, "preempted": 2,
                           "resized": 1}.items():
        assert value(found, "tfplatform_trial_outcomes_total", outcome=outcome) == count

    assert value(found, "tfplatform_nodes", state="ready") == 1
    assert value(found, "tfplatform_nodes", state="cordoned") == 1
    assert value(found, "tfplatform_nodes", state="lost") == 0

    running = state["running"]
    assert value(found, "tfplatform_experiment_images_per_second",
                 experiment=str(running.pk), user="ada", team="vision") == 250.5
    assert len(found["tfplatform_experiment_images_per_second"]) == 1  # bob's reported none

    # ada's trial waited 60 s since submission, bob's restart 30 s since its predecessor ended.
    assert value(found, "tfplatform_admission_wait_seconds_bucket", team="vision", le="30.0") == 0
    assert value(found, "tfplatform_admission_wait_seconds_bucket", team="vision", le="60.0") == 1
    assert value(found, "tfplatform_admission_wait_seconds_bucket", team="speech", le="30.0") == 1
    assert value(found, "tfplatform_admission_wait_seconds_gcount", team="speech") == 1
    assert value(found, "tfplatform_admission_wait_seconds_gsum", team="vision") == (
        pytest.approx(60, abs=1))

    held = {labels["UUID"]: labels for labels, v in found["tfplatform_gpu_allocation_info"]}
    assert set(held) == {gpu.uuid for gpu in state["gpus"]}
    first = held[state["gpus"][0].uuid]
    assert first["experiment"] == str(running.pk) and first["trial"] == str(state["trial"].pk)
    assert (first["user"], first["team"], first["node"], first["gpu"]) == (
        "ada", "vision", "gpu-1", "0")
    assert held[state["gpus"][2].uuid]["experiment"] == str(state["resumed"].pk)


def test_openmetrics_is_served_when_asked_for_with_the_wait_as_a_gauge_histogram(
    client: Client, state: dict
) -> None:
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )

    answer = client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0",
                        HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert answer["Content-Type"].startswith("application/openmetrics-text")
    families = {f.name: f for f in openmetrics_families(answer.content.decode())}
    assert families["tfplatform_admission_wait_seconds"].type == "gaugehistogram"
    assert families["tfplatform_preemptions"].type == "counter"
    assert families["tfplatform_gpu_allocation"].type == "info"


def test_web_process_metrics_of_django_prometheus_are_served_too(client: Client) -> None:
    client.get("/healthz")
    found = samples(scrape(client))
    assert any(name.startswith("django_http_requests_total_by_view") for name in found)
    assert any(name.startswith("django_db_execute_total") for name in found)
    assert "tfplatform_queue_length" in found  # both kinds in one scrape


def test_gpu_uuids_of_emulated_slots_are_stable_and_nvml_shaped() -> None:
    from tfplatform.cluster.discovery import DeviceInfo
    from tfplatform.cluster.services import node_register

    slots = [DeviceInfo(kind="gpu", index=i, name="slot", emulated=True) for i in range(2)]
    node = node_register(hostname="h1", cpu_count=1, memory_bytes=0, devices=slots,
                         trial_runtime="process")
    first = sorted(node.devices.values_list("uuid", flat=True))
    node_register(hostname="h1", cpu_count=1, memory_bytes=0, devices=slots,
                  trial_runtime="process")
    assert sorted(node.devices.values_list("uuid", flat=True)) == first
    assert all(u.startswith("GPU-") and len(u) == 40 for u in first) and len(set(first)) == 2
    other = node_register(hostname="h2", cpu_count=1, memory_bytes=0, devices=slots,
                          trial_runtime="process")
    assert not set(other.devices.values_list("uuid", flat=True)) & set(first)
    real = [DeviceInfo(kind="gpu", index=0, name="A100", uuid="GPU-real-one")]
    node = node_register(hostname="h3", cpu_count=1, memory_bytes=0, devices=real,
                         trial_runtime="process")
    assert list(node.devices.values_list("uuid", flat=True)) == ["GPU-real-one"]


class TestWhoMayScrape:
    """The token from every address: tasks and workspaces reach the web app from loopback or
    the internal network, and no address is trusted instead."""

    OUTSIDE = {"REMOTE_ADDR": "203.0.113.9"}

    @pytest.mark.parametrize("address", ["127.0.0.1", "::1", "10.1.2.3", "203.0.113.9"])
    def test_without_the_token_every_address_gets_404(self, client: Client,
                                                      address: str) -> None:
        answer = client.get("/metrics", REMOTE_ADDR=address)
        assert answer.status_code == 404
        assert b"tfplatform_" not in answer.content
        assert client.get("/metrics", REMOTE_ADDR=address,
                          HTTP_AUTHORIZATION="Bearer ").status_code == 404
        # Another scheme's credentials are no token either (an API token, say).
        assert client.get("/metrics", REMOTE_ADDR=address,
                          HTTP_AUTHORIZATION=f"Token {TOKEN}").status_code == 404

    def test_a_wrong_token_gets_403_from_every_address(self, client: Client) -> None:
        for address in ("203.0.113.9", "127.0.0.1"):
            answer = client.get("/metrics", REMOTE_ADDR=address,
                                HTTP_AUTHORIZATION=f"Bearer {TOKEN}x")
            assert answer.status_code == 403
            assert b"tfplatform_" not in answer.content

    def test_no_token_configured_accepts_no_token(self, client: Client, settings: object,
        platform_settings_override: PlatformSettingsOverride) -> None:
        platform_settings_override(metrics_token="")
        answer = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
        assert answer.status_code == 404
        answer = client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything", **self.OUTSIDE)
        assert answer.status_code == 403

    def test_the_token_is_accepted_from_anywhere(self, client: Client, state: dict) -> None:
        for address in ("203.0.113.9", "127.0.0.1"):
            text = scrape(client, REMOTE_ADDR=address)
            assert value(samples(text), "tfplatform_queue_length") == 5
