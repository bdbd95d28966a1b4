"""Measured GPU utilization per allocation, and the idle rule, from recorded samples."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.factories import DeviceFactory, NodeFactory, TrialFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.cluster.models import Allocation, AllocationUtilization, Device, Node
from tfplatform.cluster.selectors import allocation_idle_since
from tfplatform.cluster.services import allocations_utilization_record, node_heartbeat

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _idle_after_30_minutes(settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(idle_gpu_minutes=30)


def held(*, emulated: bool = False, index: int = 0, node: Node | None = None) -> Allocation:
    device = DeviceFactory(node=node or NodeFactory(), kind=Device.Kind.GPU, index=index,
                           emulated=emulated, name="NVIDIA A100" if not emulated else "slot")
    return Allocation.objects.create(holder=TrialFactory(), node=device.node, device=device,
                                     started_at=T0)


def record(allocation: Allocation, percents: list[float], *, every: timedelta,
           start: datetime = T0) -> None:
    assert allocation.device is not None
    for step, percent in enumerate(percents):
        allocations_utilization_record(node=allocation.node,
                                       percents={allocation.device.index: percent},
                                       at=start + step * every)


def idle_since(allocation: Allocation) -> datetime | None:
    return allocation_idle_since(allocation=Allocation.objects.select_related(
        "utilization").get(pk=allocation.pk))


def test_a_gpu_at_zero_for_the_configured_time_is_idle() -> None:
    allocation = held()
    record(allocation, [0.0] * 30, every=timedelta(minutes=1))  # 29 minutes of samples
    assert idle_since(allocation) is None
    record(allocation, [0.4], every=timedelta(0), start=T0 + timedelta(minutes=30))
    assert idle_since(allocation) == T0
    measured = AllocationUtilization.objects.get(allocation=allocation)
    assert measured.samples == 31 and measured.busy_at is None


def test_idle_counts_from_the_last_busy_sample() -> None:
    allocation = held()
    record(allocation, [90.0] * 10 + [0.0] * 25, every=timedelta(minutes=1))
    assert idle_since(allocation) is None  # idle 25 minutes only, since minute 9
    record(allocation, [0.0] * 6, every=timedelta(minutes=1), start=T0 + timedelta(minutes=35))
    assert idle_since(allocation) == T0 + timedelta(minutes=9)
    record(allocation, [55.0], every=timedelta(0), start=T0 + timedelta(minutes=41))
    assert idle_since(allocation) is None  # busy again


def test_emulated_devices_are_not_measured_and_never_idle() -> None:
    allocation = held(emulated=True)
    assert allocations_utilization_record(node=allocation.node, percents={0: 0.0}, at=T0) == 0
    assert allocations_utilization_record(node=allocation.node, percents={0: 0.0},
                                          at=T0 + timedelta(hours=5)) == 0
    assert not AllocationUtilization.objects.exists()
    assert idle_since(allocation) is None


def test_released_or_unstarted_allocations_are_not_measured_or_flagged() -> None:
    allocation = held()
    record(allocation, [0.0, 0.0], every=timedelta(hours=1))
    assert idle_since(allocation) == T0
    Allocation.objects.filter(pk=allocation.pk).update(released_at=T0 + timedelta(hours=1))
    assert idle_since(allocation) is None
    waiting = held(node=allocation.node, index=1)
    Allocation.objects.filter(pk=waiting.pk).update(started_at=None)
    assert allocations_utilization_record(node=waiting.node, percents={1: 0.0}, at=T0) == 0


def test_heartbeat_folds_the_nodes_gpu_samples_into_their_holders() -> None:
    allocation = held()
    free = DeviceFactory(node=allocation.node, kind=Device.Kind.GPU, index=1, emulated=False)
    node_heartbeat(hostname=allocation.node.hostname, gpu_utilization={0: 42.0, 1: 0.0, 7: 3.0})
    measured = AllocationUtilization.objects.get()
    assert measured.allocation_id == allocation.pk and measured.last_percent == 42.0
    assert not free.allocations.exists()
    node_heartbeat(hostname=allocation.node.hostname, gpu_utilization={0: 250.0})
    measured.refresh_from_db()
    assert measured.samples == 2 and measured.last_percent == 100.0  # clamped


def test_nvml_utilization_is_reported_only_for_real_gpus() -> None:
    from tfplatform.cluster.discovery import gpus_discover, gpus_utilization

    measured = gpus_utilization()
    real = gpus_discover()
    # No GPU here: nothing measured, so emulated slots stay "not measured" rather than 0.
    assert sorted(measured) == [gpu.index for gpu in real]
    assert all(0.0 <= percent <= 100.0 for percent in measured.values())
