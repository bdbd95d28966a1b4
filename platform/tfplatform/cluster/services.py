"""Writes to the cluster inventory: node registration, heartbeats, cordon and drain."""

import platform
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from tfplatform.cluster.discovery import DeviceInfo
from tfplatform.cluster.dispatch import scheduler_wake_on_commit
from tfplatform.cluster.models import Allocation, Device, Node
from tfplatform.core.errors import InvalidInput, InvalidTransition


def node_queue_name(*, hostname: str) -> str:
    return f"node.{hostname}"


def node_register(
    *,
    hostname: str,
    cpu_count: int,
    memory_bytes: int,
    devices: list[DeviceInfo],
    trial_runtime: str,
    address: str = "127.0.0.1",
) -> Node:
    """Create or refresh a node and make its device rows match what it reports now.

    `trial_runtime` is how the node runs trials now ("sandbox", "docker", "podman", or "process":
    not isolated); pages and the API flag trials that ran on a node without isolation.
    """
    if trial_runtime not in Node.TrialRuntime.values:
        raise InvalidInput(
            f"Unknown trial runtime {trial_runtime!r}; choose one of "
            f"{', '.join(Node.TrialRuntime.values)}.",
            field="trial_runtime",
        )
    with transaction.atomic():
        node, _ = Node.objects.select_for_update().get_or_create(
            hostname=hostname, defaults={"queue": node_queue_name(hostname=hostname)}
        )
        node.address = address
        node.trial_runtime = trial_runtime
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
        if node.state == Node.State.READY:
            scheduler_wake_on_commit()  # new or returning capacity
    return node


def node_recover_after_restart(*, node: Node) -> list[int]:
    """A worker that just started supervises nothing: trials it held died with the old one."""
    from tfplatform.experiments.execution import trial_fail_orphaned

    # Parts not started yet are still waiting in this node's queue: the new worker runs them.
    trial_ids = sorted(
        set(
            Allocation.objects.filter(
                node=node, released_at__isnull=True, started_at__isnull=False
            ).values_list("trial_id", flat=True)
        )
    )
    for trial_id in trial_ids:
        trial_fail_orphaned(trial_id=trial_id, reason="The worker node restarted mid-trial.")
    return trial_ids


def node_heartbeat(*, hostname: str) -> None:
    with transaction.atomic():
        Node.objects.filter(hostname=hostname).update(last_heartbeat=timezone.now())
        revived = Node.objects.filter(hostname=hostname, state=Node.State.LOST).update(
            state=Node.State.READY
        )
        if revived:
            scheduler_wake_on_commit()  # a lost node is back with its devices


def node_set_state(*, node: Node, state: str) -> Node:
    allowed = {Node.State.READY, Node.State.CORDONED, Node.State.DRAINING}
    if state not in allowed:
        raise InvalidTransition(f"A node cannot be set to {state} by hand.")
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(state=state)
        if state == Node.State.READY:
            scheduler_wake_on_commit()  # uncordoned: its devices can be placed on again
    node.refresh_from_db()
    return node


def nodes_mark_lost() -> list[int]:
    """Nodes silent for longer than NODE_LOST_SECONDS are lost; their trials fail retryably."""
    from tfplatform.experiments.execution import trial_fail_orphaned

    cutoff = timezone.now() - timedelta(seconds=settings.PLATFORM["NODE_LOST_SECONDS"])
    stale = list(
        Node.objects.exclude(state=Node.State.LOST)
        .filter(last_heartbeat__lt=cutoff)
        .values_list("pk", flat=True)
    )
    for node_id in stale:
        with transaction.atomic():
            Node.objects.filter(pk=node_id).update(state=Node.State.LOST)
        trial_ids = set(
            Allocation.objects.filter(node_id=node_id, released_at__isnull=True).values_list(
                "trial_id", flat=True
            )
        )
        for trial_id in trial_ids:
            trial_fail_orphaned(
                trial_id=trial_id,
                reason="A node running this trial stopped sending heartbeats (node lost).",
            )
    return stale


def nodes_finish_draining() -> None:
    """A draining node whose last trial has ended becomes cordoned: drained."""
    busy = Allocation.objects.filter(released_at__isnull=True).values("node_id")
    Node.objects.filter(state=Node.State.DRAINING).exclude(pk__in=busy).update(
        state=Node.State.CORDONED
    )
