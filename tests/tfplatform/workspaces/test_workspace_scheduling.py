"""Workspace sessions in the scheduling pass, on factory nodes (no worker process): a session
without GPUs holds as many CPU slots as it asked for, all on one node."""

from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from tests.factories import DeviceFactory, ExperimentFactory, NodeFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.cluster.models import Allocation, Device, Node
from tfplatform.cluster.services import allocations_claim_part
from tfplatform.experiments.models import Trial
from tfplatform.experiments.services.execution import trial_spec_build
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.experiments.usage.report import usage_report
from tfplatform.experiments.usage.rows import usage_query
from tfplatform.workspaces.services import (
    WorkspaceRequest,
    workspace_create,
    workspace_restart,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def homes(tmp_path: Path, settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(home_dir=tmp_path / "homes")


def cpu_node(*, slots: int) -> Node:
    node = NodeFactory()
    for index in range(slots):
        DeviceFactory(node=node, kind=Device.Kind.CPU, index=index)
    return node


def test_a_session_waits_for_its_cpu_slots_on_one_node_then_holds_them_all() -> None:
    node = cpu_node(slots=2)
    cpu_node(slots=1)
    owner = UserFactory()
    workspace = workspace_create(owner=owner, request=WorkspaceRequest(name="big", cpu_slots=2))
    session = workspace.experiment
    assert session is not None and session.cpu_slots_per_worker == 2
    # The node registers again with one slot: two free in the cluster, but not on one node.
    Device.objects.filter(node=node, kind=Device.Kind.CPU, index=1).delete()

    assert scheduler_pass() == 0
    session.refresh_from_db()
    assert session.state == "queued"
    assert session.pending_reason.startswith(
        "Needs 2 CPU slots on one node; the largest free block is 1.")

    DeviceFactory(node=node, kind=Device.Kind.CPU, index=1)
    assert scheduler_pass() == 1
    held = list(Allocation.objects.select_related("device"))
    assert len(held) == 2
    assert {a.node_id for a in held} == {node.pk}
    assert {a.device.kind for a in held} == {Device.Kind.CPU}

    # The node sizes the session's container by its two slots.
    trial = Trial.objects.get(experiment=session)
    assert trial_spec_build(trial=trial).resources.cpu_slots_per_worker == 2
    # Showback counts each slot: two allocations, twice the slot-time of one.
    allocations_claim_part(trial_id=trial.pk, node_id=node.pk)
    later = timezone.now() + timedelta(hours=1)
    # The report's days end at `later`'s (one hour on may be tomorrow, UTC).
    (row,) = usage_report(viewer=owner, query=usage_query(today=later.astimezone(UTC).date()),
                          now=later)
    assert row.allocations == 2 and row.gpu_seconds == 0
    assert row.cpu_slot_hours == pytest.approx(2.0, abs=0.01)


def test_a_session_preempts_lower_priority_trials_for_its_slots() -> None:
    cpu_node(slots=2)
    low = [ExperimentFactory(), ExperimentFactory()]
    assert scheduler_pass() == 2
    workspace = workspace_create(owner=UserFactory(),
                                 request=WorkspaceRequest(name="w", cpu_slots=2, priority=5))
    assert scheduler_pass() == 0
    assert workspace.experiment is not None
    workspace.experiment.refresh_from_db()
    assert workspace.experiment.pending_reason.startswith(
        "Waiting for devices: preempting 2 lower-priority trials")
    assert sorted(Trial.objects.filter(experiment__in=low).values_list("stop_reason", flat=True)
                  ) == ["preempted", "preempted"]


def test_a_restart_resizes_cpu_slots_and_gpus_replace_them() -> None:
    workspace = workspace_create(owner=UserFactory(), request=WorkspaceRequest(name="w", gpus=1))
    assert workspace.cpu_slots == 1
    workspace = workspace_restart(workspace=workspace, gpus=0, cpu_slots=4)
    assert (workspace.gpus, workspace.cpu_slots) == (0, 4) and workspace.experiment is not None
    assert workspace.experiment.cpu_slots_per_worker == 4
    workspace = workspace_restart(workspace=workspace)  # as it was: four slots again
    assert workspace.experiment is not None
    assert workspace.experiment.cpu_slots_per_worker == 4
    workspace = workspace_restart(workspace=workspace, gpus=1)  # GPUs replace the CPU slots
    assert (workspace.gpus, workspace.cpu_slots) == (1, 1)
    assert workspace.experiment is not None
    assert workspace.experiment.cpu_slots_per_worker == 1
