from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import DeviceFactory, ExperimentFactory, NodeFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.experiments.services.scheduling import scheduler_pass

pytestmark = pytest.mark.django_db


def test_nodes_list_shows_devices_and_holders_only_to_those_who_may_see() -> None:
    node = NodeFactory(hostname="gpu-box")
    DeviceFactory(node=node, kind="gpu", index=0)
    experiment = ExperimentFactory(gpus_per_worker=1, name="secret-project")
    scheduler_pass()
    owner, stranger = APIClient(), APIClient()
    owner.force_authenticate(experiment.owner)
    stranger.force_authenticate(UserFactory())
    held = owner.get("/api/v1/nodes/").json()["results"][0]["devices"][0]["held_by"]
    assert held["experiment"] == experiment.pk and held["name"] == "secret-project"
    hidden = stranger.get("/api/v1/nodes/").json()["results"][0]["devices"][0]["held_by"]
    assert hidden == {"experiment": None, "name": "in use", "task": "worker"}


def test_nodes_list_says_how_each_node_runs_trials() -> None:
    NodeFactory(hostname="a-sandboxed")
    NodeFactory(hostname="b-dev-box", unisolated=True)
    client = APIClient()
    client.force_authenticate(UserFactory())
    nodes = client.get("/api/v1/nodes/").json()["results"]
    assert [(n["hostname"], n["trial_runtime"]) for n in nodes] == [
        ("a-sandboxed", "sandbox"),
        ("b-dev-box", "process"),
    ]


def test_only_staff_cordon_drain_and_enable() -> None:
    node = NodeFactory()
    user, staff = APIClient(), APIClient()
    user.force_authenticate(UserFactory())
    staff.force_authenticate(UserFactory(is_staff=True))
    assert user.post(f"/api/v1/nodes/{node.pk}/cordon/").status_code == 403
    for action, state in (("cordon", "cordoned"), ("drain", "draining"), ("enable", "ready")):
        response = staff.post(f"/api/v1/nodes/{node.pk}/{action}/")
        assert response.status_code == 200
        assert response.json()["state"] == state
    assert staff.post(f"/api/v1/nodes/{node.pk}/explode/").status_code == 404


def test_drained_node_becomes_cordoned_once_idle_and_lost_nodes_are_marked() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from tfplatform.cluster.services import nodes_finish_draining, nodes_mark_lost

    node = NodeFactory(state="draining")
    silent = NodeFactory(last_heartbeat=timezone.now() - timedelta(hours=1))
    nodes_finish_draining()
    assert nodes_mark_lost().node_ids == [silent.pk]
    node.refresh_from_db()
    silent.refresh_from_db()
    assert (node.state, silent.state) == ("cordoned", "lost")


def test_lost_node_fails_its_trial_retryably_and_requeues() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from tfplatform.experiments.services.execution import nodes_lost_handle

    node = NodeFactory()
    DeviceFactory(node=node, kind="cpu", index=0)
    experiment = ExperimentFactory()
    scheduler_pass()
    node.last_heartbeat = timezone.now() - timedelta(hours=1)
    node.save()
    assert nodes_lost_handle() == [node.pk]
    experiment.refresh_from_db()
    trial = experiment.trials.get()
    assert trial.state == "failed" and trial.retryable
    assert experiment.state == "queued"
    assert "node lost" in experiment.pending_reason
    assert not trial.allocations.filter(released_at__isnull=True).exists()


def test_restarted_worker_releases_what_its_previous_life_held() -> None:
    from django.utils import timezone

    from tfplatform.cluster.models import Allocation
    from tfplatform.experiments.services.execution import node_restart_recover

    node = NodeFactory()
    DeviceFactory(node=node, kind="cpu", index=0)
    experiment = ExperimentFactory()
    scheduler_pass()
    assert node_restart_recover(node=node) == []  # its message is still queued for us
    Allocation.objects.update(started_at=timezone.now())
    assert node_restart_recover(node=node) == [experiment.trials.get().pk]
    experiment.refresh_from_db()
    assert experiment.state == "queued"
    assert "restarted" in experiment.pending_reason
    assert scheduler_pass() == 1  # the freed slot is used again


def test_declared_slots_stand_in_for_gpus_only_when_nvml_finds_none() -> None:
    from tfplatform.cluster.discovery import DeviceInfo, devices_inventory

    devices = devices_inventory(gpus=[], declared_gpu_slots=2, cpu_slots=1)
    assert [(d.kind, d.index, d.emulated) for d in devices] == [
        ("gpu", 0, True),
        ("gpu", 1, True),
        ("cpu", 0, False),
    ]
    found = [DeviceInfo(kind="gpu", index=0, name="NVIDIA A100", memory_bytes=40 * 2**30,
                        compute_capability="8.0")]
    devices = devices_inventory(gpus=found, declared_gpu_slots=2, cpu_slots=1)
    assert [(d.kind, d.index, d.name.split(" (")[0], d.emulated) for d in devices] == [
        ("gpu", 0, "NVIDIA A100", False),
        ("cpu", 0, "CPU slot 0", False),
    ]


def test_discovery_reports_what_this_machine_has_whatever_it_has() -> None:
    from tfplatform.cluster.discovery import devices_discover, gpus_discover

    # Holds with and without NVIDIA GPUs: the suite never assumes the absence of hardware.
    real = gpus_discover()
    assert all(g.kind == "gpu" and not g.emulated and g.memory_bytes > 0 for g in real)
    devices = devices_discover(declared_gpu_slots=2, cpu_slots=1)
    gpus = [d for d in devices if d.kind == "gpu"]
    assert gpus == (real or [d for d in gpus if d.emulated])
    assert len(gpus) == (len(real) or 2)
    assert [d.kind for d in devices if d.kind == "cpu"] == ["cpu"]


def test_a_redelivered_trial_message_starts_nothing_twice() -> None:
    from django.utils import timezone

    from tfplatform.cluster.models import Allocation
    from tfplatform.experiments.services.execution import trial_execute

    node = NodeFactory()
    DeviceFactory(node=node, kind="cpu", index=0)
    experiment = ExperimentFactory()
    scheduler_pass()
    trial = experiment.trials.get()
    # This node already took up its part (the first delivery); the copy must do nothing.
    Allocation.objects.update(started_at=timezone.now())
    trial_execute(trial_id=trial.pk, node_id=node.pk)
    trial.refresh_from_db()
    assert trial.state == "pending" and trial.started_at is None


def test_nodes_list_says_how_much_work_disk_each_node_has_and_which_are_full(
    settings: Any, platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(work_disk_min_free_mb=100)
    NodeFactory(hostname="a-roomy", work_disk_free_bytes=2**30)
    NodeFactory(hostname="b-crowded", work_disk_free_bytes=2**20)
    NodeFactory(hostname="c-new", work_disk_free_bytes=None)
    client = APIClient()
    client.force_authenticate(UserFactory())
    nodes = client.get("/api/v1/nodes/").json()["results"]
    assert [(n["hostname"], n["work_disk_free_bytes"], n["disk_pressure"]) for n in nodes] == [
        ("a-roomy", 2**30, False),
        ("b-crowded", 2**20, True),
        ("c-new", None, False),
    ]
