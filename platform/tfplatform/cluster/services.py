"""Writes to the cluster inventory: node registration, heartbeats, cordon and drain."""

import platform

from django.db import transaction
from django.utils import timezone

from tfplatform.cluster.discovery import DeviceInfo
from tfplatform.cluster.models import Device, Node
from tfplatform.core.errors import InvalidTransition


def node_queue_name(*, hostname: str) -> str:
    return f"node.{hostname}"


def node_register(
    *, hostname: str, cpu_count: int, memory_bytes: int, devices: list[DeviceInfo]
) -> Node:
    """Create or refresh a node and make its device rows match what it reports now."""
    with transaction.atomic():
        node, _ = Node.objects.select_for_update().get_or_create(
            hostname=hostname, defaults={"queue": node_queue_name(hostname=hostname)}
        )
        node.cpu_count = cpu_count
        node.memory_bytes = memory_bytes
        node.os_info = f"{platform.platform()} / Python {platform.python_version()}"
        node.last_heartbeat = timezone.now()
        if node.state == Node.State.LOST:
            node.state = Node.State.READY
        node.save()
        seen = set()
        for info in devices:
            Device.objects.update_or_create(
                node=node,
                kind=info.kind,
                index=info.index,
                defaults={
                    "name": info.name,
                    "memory_bytes": info.memory_bytes,
                    "compute_capability": info.compute_capability,
                    "emulated": info.emulated,
                },
            )
            seen.add((info.kind, info.index))
        for device in node.devices.all():
            # A device that disappeared but is still held stays until its trial lets go.
            if (device.kind, device.index) not in seen and not device.allocations.filter(
                released_at__isnull=True
            ).exists():
                device.delete()
    return node


def node_heartbeat(*, hostname: str) -> None:
    Node.objects.filter(hostname=hostname).update(last_heartbeat=timezone.now())
    Node.objects.filter(hostname=hostname, state=Node.State.LOST).update(state=Node.State.READY)


def node_set_state(*, node: Node, state: str) -> Node:
    allowed = {Node.State.READY, Node.State.CORDONED, Node.State.DRAINING}
    if state not in allowed:
        raise InvalidTransition(f"A node cannot be set to {state} by hand.")
    Node.objects.filter(pk=node.pk).update(state=state)
    node.refresh_from_db()
    return node
