"""Node registration records how the node runs trials, and keeps it current."""

import pytest

from tfplatform.cluster.discovery import DeviceInfo
from tfplatform.cluster.models import Node
from tfplatform.cluster.services import node_register
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
