"""Spark clusters as a backend for trials: staff register one, its node process
(`manage.py spark_node --cluster NAME`) offers its slots in pool `spark-<name>`, and each trial
placed there runs as a Spark application (training/spark/).

    spark_cluster_register(actor=..., name=..., master=..., conf=..., task_slots=..., gpus=...)
    spark_cluster_update(actor=..., cluster=..., **changes)
    spark_cluster_delete(actor=..., cluster=...)
    spark_node_register(cluster=..., address=...)   # the node process, at its start
    spark_target_for(node=..., channel_host=...)    # what a trial's driver is given
"""

import os
from typing import Any

from django.conf import settings
from django.db import transaction

from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import Actor, audit_record
from tfplatform.cluster.discovery import DeviceInfo, memory_total_bytes, work_disk_free_bytes
from tfplatform.cluster.models import Allocation, Node, SparkCluster
from tfplatform.cluster.placement import KIND_CPU, KIND_GPU
from tfplatform.cluster.pools import POOL_PATTERN, SPARK_POOL_PREFIX
from tfplatform.cluster.services import node_register
from tfplatform.core.errors import Conflict, InvalidInput
from training import errors as training_errors
from training.spark.target import (
    SparkTarget,
    master_is_local,
    spark_conf_check,
    spark_master_check,
)

NAME_MAX = 50
SLOTS_MAX = 10_000
GPUS_MAX = 10_000
FIELDS = ("master", "conf", "task_slots", "gpus", "python")


def _snapshot(cluster: SparkCluster) -> dict[str, Any]:
    # The configuration may hold secrets (spark.authenticate.secret): the log names its keys.
    return {"master": cluster.master, "conf_keys": sorted(cluster.conf), "gpus": cluster.gpus,
            "task_slots": cluster.task_slots, "python": cluster.python}


def _checked(*, values: dict[str, Any]) -> dict[str, Any]:
    checked = dict(values)
    for field, check in (("master", lambda v: spark_master_check(master=str(v))),
                         ("conf", lambda v: spark_conf_check(conf=v))):
        if field in values:
            try:
                checked[field] = check(values[field])
            except training_errors.InvalidInput as error:
                raise InvalidInput(str(error), field=field) from error
    if "master" in checked and master_is_local(master=checked["master"]) and \
            not settings.PLATFORM.spark_local_masters:
        # Its executors would run users' code on the node's machine, beside the platform's
        # secrets and services, with no sandbox.
        raise InvalidInput("A local master runs users' code on the Spark node's own machine "
                           "without isolation; it is refused unless the platform allows it for "
                           "development (PLATFORM_SPARK_LOCAL_MASTERS).", field="master")
    for field, most in (("task_slots", SLOTS_MAX), ("gpus", GPUS_MAX)):
        if field in values:
            value = values[field]
            least = 1 if field == "task_slots" else 0
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
                raise InvalidInput(f"{field} is a whole number from {least} to {most}.",
                                   field=field)
    if "python" in values:
        python = str(values["python"])
        if python and (not os.path.isabs(python) or len(python) > 500 or "\x00" in python):
            raise InvalidInput("python is the absolute path of the executors' Python, or empty "
                               "for theirs.", field="python")
        checked["python"] = python
    return checked


def spark_cluster_register(*, actor: Actor, name: str, master: str, conf: dict[str, Any],
                           task_slots: int, gpus: int = 0, python: str = "") -> SparkCluster:
    pool = f"{SPARK_POOL_PREFIX}{name}"
    if len(name) > NAME_MAX or not POOL_PATTERN.fullmatch(pool):
        raise InvalidInput(f"A Spark cluster's name is lowercase letters, digits and '-', at "
                           f"most {NAME_MAX}.", field="name")
    values = _checked(values={"master": master, "conf": conf, "task_slots": task_slots,
                              "gpus": gpus, "python": python})
    with transaction.atomic():
        if SparkCluster.objects.filter(name=name).exists():
            raise Conflict(f"A Spark cluster named '{name}' is registered already.")
        cluster = SparkCluster.objects.create(name=name, **values)
        audit_record(actor=actor, action=AuditAction.SPARK_CLUSTER_CREATE, target=cluster,
                     before=None, after=_snapshot(cluster))
    return cluster


def spark_cluster_update(*, actor: Actor, cluster: SparkCluster,
                         changes: dict[str, Any]) -> SparkCluster:
    unknown = set(changes) - set(FIELDS)
    if unknown:
        raise InvalidInput(f"Unknown field(s): {', '.join(sorted(unknown))}.",
                           field=sorted(unknown)[0])
    values = _checked(values=changes)
    with transaction.atomic():
        current = SparkCluster.objects.select_for_update().get(pk=cluster.pk)
        before = _snapshot(current)
        for field, value in values.items():
            setattr(current, field, value)
        current.save()
        audit_record(actor=actor, action=AuditAction.SPARK_CLUSTER_CHANGE, target=current,
                     before=before, after=_snapshot(current))
    return current


def spark_cluster_delete(*, actor: Actor, cluster: SparkCluster) -> None:
    """Removes the cluster and its node; refused while a trial runs there."""
    with transaction.atomic():
        current = SparkCluster.objects.select_for_update().get(pk=cluster.pk)
        node = Node.objects.filter(hostname=current.pool).first()
        if node is not None and Allocation.objects.filter(
                node=node, released_at__isnull=True).exists():
            raise Conflict(f"Trials run on Spark cluster '{current.name}'; cancel them or wait "
                           "for them to end first.")
        audit_record(actor=actor, action=AuditAction.SPARK_CLUSTER_DELETE, target=current,
                     before=_snapshot(current), after=None)
        if node is not None:
            node.delete()
        current.delete()


def spark_node_register(*, cluster: SparkCluster, address: str) -> Node:
    """The cluster's node as its process registers it: its slots and GPUs, in its own pool."""
    devices = [DeviceInfo(kind=KIND_GPU, index=i, name=f"Spark GPU {i}")
               for i in range(cluster.gpus)]
    devices += [DeviceInfo(kind=KIND_CPU, index=i, name=f"Spark task slot {i}")
                for i in range(cluster.task_slots)]
    return node_register(
        hostname=cluster.pool, cpu_count=cluster.task_slots, memory_bytes=memory_total_bytes(),
        devices=devices, trial_runtime=Node.TrialRuntime.SPARK, address=address,
        work_disk_free_bytes=work_disk_free_bytes(), pool=cluster.pool)


def spark_target_for(*, node: Node, channel_host: str) -> SparkTarget:
    cluster = SparkCluster.objects.filter(name=node.hostname.removeprefix(SPARK_POOL_PREFIX)
                                          ).first()
    if cluster is None or node.hostname != cluster.pool:
        raise InvalidInput(f"Node {node.hostname} stands for no registered Spark cluster.")
    # The gang's ports from the platform's task range, as on its own nodes.
    return SparkTarget(name=cluster.name, master=cluster.master, conf=dict(cluster.conf),
                       channel_host=channel_host, python=cluster.python,
                       port_base=settings.PLATFORM.task_port_base,
                       port_span=settings.PLATFORM.task_port_span)
