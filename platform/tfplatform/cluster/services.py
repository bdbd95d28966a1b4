"""Writes to the cluster inventory: node registration, heartbeats, cordon and drain."""

import platform
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import Actor, audit_record
from tfplatform.cluster.discovery import DeviceInfo, emulated_gpu_uuid
from tfplatform.cluster.dispatch import scheduler_wake_on_commit
from tfplatform.cluster.models import (
    Allocation,
    AllocationUtilization,
    Device,
    Node,
    trial_holder_type,
)
from tfplatform.cluster.placement import Placement
from tfplatform.cluster.pools import (
    DEFAULT_POOL,
    gpu_type_choose,
    labels_parse,
    pool_check,
    pool_dedicated,
)
from tfplatform.cluster.selectors import IDLE_PERCENT, disk_free_min_bytes, heartbeat_fresh_after
from tfplatform.core.bulk import rows_insert
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
    work_disk_free_bytes: int | None = None,
    pool: str = DEFAULT_POOL,
    labels: tuple[str, ...] = (),
    gpu_type: str = "",
) -> Node:
    """Create or refresh a node and make its device rows match what it reports now.

    `trial_runtime` is how the node runs trials now ("sandbox", "docker", "podman", or "process":
    not isolated); pages and the API flag trials that ran on a node without isolation.
    `pool`, `labels` (`key=value`) and `gpu_type` (configured; else NVML's name) place it
    for experiments that ask (cluster/pools.py).
    """
    pool_check(pool=pool)
    if pool_dedicated(pool=pool) and trial_runtime != Node.TrialRuntime.SPARK:
        raise InvalidInput(f"Pool '{pool}' is named as a Spark cluster's (spark-…): a worker "
                           "node joins another pool.", field="pool")
    parsed_labels = labels_parse(items=labels)
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
        node.work_disk_free_bytes = work_disk_free_bytes
        node.pool, node.labels = pool, parsed_labels
        node.gpu_type = gpu_type_choose(configured=gpu_type, discovered=[
            info.name for info in devices if info.kind == Device.Kind.GPU and not info.emulated])
        node.os_info = f"{platform.platform()} / Python {platform.python_version()}"
        node.last_heartbeat = Now()  # the database's clock, as every heartbeat (selectors)
        revived = node.state == Node.State.LOST
        if revived:
            node.state = Node.State.READY
        node.save()
        if revived:
            _state_change_record(node=node, before=Node.State.LOST)
        node.refresh_from_db(fields=["last_heartbeat"])
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
                    "uuid": info.uuid or (
                        emulated_gpu_uuid(hostname=hostname, index=info.index)
                        if info.kind == Device.Kind.GPU else ""),
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


def node_trials_held_mid_run(*, node: Node) -> list[int]:
    """Trials a restarted worker held mid-run: they died with the old worker process, and the
    caller fails them (experiments/services/execution.py `node_restart_recover`). Parts not started
    yet are still waiting in the node's queue: the new worker runs them."""
    return sorted(
        set(
            Allocation.objects.of_trials().filter(
                node=node, released_at__isnull=True, started_at__isnull=False
            ).values_list("holder_id", flat=True)
        )
    )


def node_heartbeat(*, hostname: str, work_disk_free_bytes: int | None = None,
                   gpu_utilization: dict[int, float] | None = None) -> None:
    """The node is alive, and (when measured) has this much free space for trials and its GPUs
    (index → percent, from NVML) were this busy."""
    if gpu_utilization:
        node = Node.objects.filter(hostname=hostname).first()
        if node is not None:
            allocations_utilization_record(node=node, percents=gpu_utilization,
                                           at=timezone.now())
    with transaction.atomic():
        nodes = Node.objects.filter(hostname=hostname)
        relieved = work_disk_free_bytes is not None and (
            work_disk_free_bytes >= disk_free_min_bytes()
            and nodes.filter(work_disk_free_bytes__lt=disk_free_min_bytes()).exists()
        )
        fields: dict[str, Any] = {"last_heartbeat": Now()}
        if work_disk_free_bytes is not None:
            fields["work_disk_free_bytes"] = work_disk_free_bytes
        nodes.update(**fields)
        revived = list(nodes.filter(state=Node.State.LOST).select_for_update())
        for node in revived:
            Node.objects.filter(pk=node.pk).update(state=Node.State.READY)
            node.state = Node.State.READY
            _state_change_record(node=node, before=Node.State.LOST)
        if revived or relieved:
            scheduler_wake_on_commit()  # a lost node is back, or space was freed on one


# What staff do to a node, by the state it is set to, as the audit log names it.
STAFF_STATE_ACTIONS: dict[str, str] = {
    Node.State.READY: AuditAction.NODE_ENABLE,
    Node.State.CORDONED: AuditAction.NODE_CORDON,
    Node.State.DRAINING: AuditAction.NODE_DRAIN,
}


def node_set_state(*, node: Node, state: str, actor: Actor = None) -> Node:
    """Staff cordon, drain or enable a node; `actor` is who (the audit log's row)."""
    if state not in STAFF_STATE_ACTIONS:
        raise InvalidTransition(f"A node cannot be set to {state} by hand.")
    with transaction.atomic():
        current = Node.objects.select_for_update().get(pk=node.pk)
        before = current.state
        Node.objects.filter(pk=node.pk).update(state=state)
        current.state = state
        audit_record(actor=actor, action=STAFF_STATE_ACTIONS[state], target=current,
                     before={"state": before}, after={"state": state})
        if state == Node.State.READY:
            scheduler_wake_on_commit()  # uncordoned: its devices can be placed on again
    node.refresh_from_db()
    return node


@dataclass(frozen=True)
class NodesLost:
    node_ids: list[int]
    trial_ids: list[int]  # trials that held devices on them: the caller fails them


def nodes_mark_lost() -> NodesLost:
    """Nodes silent for longer than NODE_LOST_SECONDS are lost; returns them and the trials
    they held (experiments/services/execution.py `nodes_lost_handle` fails those retryably)."""
    with transaction.atomic():
        # Locked, so of two schedulers only one marks (and records) each node.
        nodes = list(Node.objects.select_for_update().exclude(state=Node.State.LOST)
                     .filter(last_heartbeat__lt=heartbeat_fresh_after()))
        stale = [node.pk for node in nodes]
        Node.objects.filter(pk__in=stale).update(state=Node.State.LOST)
        for node in nodes:
            before, node.state = node.state, Node.State.LOST
            _state_change_record(node=node, before=before)
    trial_ids = sorted(set(
        Allocation.objects.of_trials().filter(node_id__in=stale, released_at__isnull=True)
        .values_list("holder_id", flat=True)
    ))
    return NodesLost(node_ids=stale, trial_ids=trial_ids)


def nodes_finish_draining() -> None:
    """A draining node whose last trial has ended becomes cordoned: drained."""
    busy = Allocation.objects.filter(released_at__isnull=True).values("node_id")
    with transaction.atomic():
        drained = list(Node.objects.select_for_update().filter(state=Node.State.DRAINING)
                       .exclude(pk__in=busy))
        Node.objects.filter(pk__in=[node.pk for node in drained]).update(
            state=Node.State.CORDONED)
        for node in drained:
            node.state = Node.State.CORDONED
            _state_change_record(node=node, before=Node.State.DRAINING)


def _state_change_record(*, node: Node, before: str) -> None:
    """A state the platform itself gave a node (lost, back, drained): no actor."""
    audit_record(actor=None, action=AuditAction.NODE_STATE_CHANGE, target=node,
                 before={"state": before}, after={"state": node.state})


def allocations_create_many(*, placements_by_trial: Mapping[int, list[Placement]]) -> None:
    """Every trial a scheduling pass admitted gets its devices, in one statement (core.bulk:
    thousands of rows at 10,000 queued)."""
    holder_type = trial_holder_type().pk
    rows_insert(
        model=Allocation,
        fields=("holder_type", "holder_id", "node", "device", "task_type", "task_index",
                "share_milli"),
        rows=[
            (holder_type, trial_id, placement.node_id, device_id, placement.need.task_type,
             placement.need.task_index, placement.share_milli)
            for trial_id, placements in placements_by_trial.items()
            for placement in placements
            for device_id in placement.device_ids
        ],
    )


def allocations_claim_part(*, trial_id: int, node_id: int) -> bool:
    """This node takes up its part of the trial; False when it already did (redelivery)."""
    return bool(
        Allocation.objects.of_trial(trial_id=trial_id).filter(
            node_id=node_id, started_at__isnull=True, released_at__isnull=True
        ).update(started_at=Now())
    )


def allocations_release(*, trial_id: int) -> int:
    return Allocation.objects.of_trial(trial_id=trial_id).filter(
        released_at__isnull=True).update(released_at=Now())


def allocations_utilization_record(*, node: Node, percents: dict[int, float],
                                   at: datetime) -> int:
    """Fold one measurement of the node's real GPUs (index → percent) into the running
    allocations holding them; returns how many were measured. Emulated and free devices are
    skipped: there is nothing to measure, or nobody to account it to."""
    held = Allocation.objects.filter(
        node=node, released_at__isnull=True, started_at__isnull=False,
        device__kind=Device.Kind.GPU, device__emulated=False, device__index__in=list(percents),
    ).select_related("device")
    measured = 0
    with transaction.atomic():
        for allocation in held:
            assert allocation.device is not None  # filtered on its kind above
            percent = min(max(float(percents[allocation.device.index]), 0.0), 100.0)
            row, _ = AllocationUtilization.objects.select_for_update().get_or_create(
                allocation=allocation, defaults={"first_at": at, "last_at": at})
            row.samples += 1
            row.percent_sum += percent
            row.last_percent = percent
            row.last_at = max(row.last_at, at)
            if percent > IDLE_PERCENT:
                row.busy_at = at if row.busy_at is None else max(row.busy_at, at)
            row.save()
            measured += 1
    return measured
