"""Node registration records how the node runs trials, and keeps it current."""

import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.cluster.discovery import DeviceInfo
from tfplatform.cluster.models import Node
from tfplatform.cluster.selectors import nodes_schedulable
from tfplatform.cluster.services import node_heartbeat, node_register, nodes_mark_lost
from tfplatform.core.errors import InvalidInput

pytestmark = pytest.mark.django_db

CPU_SLOT = [DeviceInfo(kind="cpu", index=0, name="cpu slot")]


def register(*, trial_runtime: str, hostname: str = "box") -> Node:
    return node_register(
        hostname=hostname,
        cpu_count=2,
        memory_bytes=0,
        devices=CPU_SLOT,
        trial_runtime=trial_runtime,
    )


def test_register_stores_the_runtime_and_a_re_registration_updates_it() -> None:
    node = register(trial_runtime="sandbox")
    assert Node.objects.get(pk=node.pk).trial_runtime == "sandbox" and node.isolated

    again = register(trial_runtime="process")
    assert again.pk == node.pk
    stored = Node.objects.get(pk=node.pk)
    assert stored.trial_runtime == "process" and not stored.isolated

    register(trial_runtime="sandbox")
    assert Node.objects.get(pk=node.pk).trial_runtime == "sandbox"


def test_register_refuses_an_unknown_runtime() -> None:
    with pytest.raises(InvalidInput, match="Unknown trial runtime 'lxc'"):
        register(trial_runtime="lxc")
    assert not Node.objects.exists()


@pytest.mark.django_db(transaction=True)  # each statement's own time, not one transaction's
def test_liveness_is_judged_on_the_database_clock_whatever_the_nodes_clock_says(
    monkeypatch: pytest.MonkeyPatch, settings: Any,
    platform_settings_override: PlatformSettingsOverride
) -> None:
    platform_settings_override(node_lost_seconds=1)
    behind, ahead = register(trial_runtime="sandbox", hostname="behind"), register(
        trial_runtime="sandbox", hostname="ahead")
    real_now = timezone.now

    def heartbeat_with_clock_off_by(*, hostname: str, minutes: int) -> None:
        # What a node whose clock is off sends: the heartbeat service runs on that node.
        with monkeypatch.context() as skewed:
            skewed.setattr(timezone, "now", lambda: real_now() + timedelta(minutes=minutes))
            node_heartbeat(hostname=hostname)

    heartbeat_with_clock_off_by(hostname="behind", minutes=-10)
    heartbeat_with_clock_off_by(hostname="ahead", minutes=+10)
    assert nodes_mark_lost().node_ids == []  # a slow clock does not make a live node lost
    assert set(nodes_schedulable().values_list("hostname", flat=True)) == {"behind", "ahead"}
    time.sleep(1.5)
    heartbeat_with_clock_off_by(hostname="behind", minutes=-10)
    # A fast clock does not keep a silent node alive for its ten minutes.
    assert nodes_mark_lost().node_ids == [ahead.pk]
    assert Node.objects.get(pk=behind.pk).state == Node.State.READY

