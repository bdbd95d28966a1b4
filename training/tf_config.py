"""The cluster layout of one trial: which tasks exist, where they listen, and their TF_CONFIG.

TF-free. Single-worker trials have one task and no TF_CONFIG. Several workers form a
MultiWorkerMirroredStrategy cluster where worker 0 is the chief. Parameter servers add `ps` tasks
plus a `chief` that runs the coordinator (it owns no variables and does no gradient work).

Every task carries its host, so a multi-node scheduler can build one `ClusterPlan` for the whole
gang and have each node's supervisor start only `plan.local(host)`; today everything is 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
from contextlib import ExitStack
from dataclasses import dataclass

from training.spec import Resources

LOCALHOST = "127.0.0.1"


@dataclass(frozen=True)
class TaskAddress:
    type: str  # "worker", "chief" or "ps"
    index: int
    host: str
    port: int

    @property
    def name(self) -> str:
        return f"{self.type}:{self.index}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterPlan:
    tasks: tuple[TaskAddress, ...]
    # The same on every node of one dispatch and never again (the platform passes when the
    # gang's devices were allocated): what is named after a dispatch (a gang's network) is
    # never a name an earlier one used, even where ids repeat (a database made anew).
    dispatch_key: str = ""

    @property
    def uses_parameter_servers(self) -> bool:
        return any(task.type == "ps" for task in self.tasks)

    @property
    def chief(self) -> TaskAddress:
        """The task that exports, writes the real checkpoints and reports the result."""
        for task in self.tasks:
            if task.type == "chief":
                return task
        return next(task for task in self.tasks if task.type == "worker" and task.index == 0)

    @property
    def essential(self) -> tuple[TaskAddress, ...]:
        """Tasks whose clean exit completes the trial; PS-mode workers and ps serve forever."""
        if self.uses_parameter_servers:
            return (self.chief,)
        return self.tasks

    def task(self, *, type: str, index: int) -> TaskAddress:
        for task in self.tasks:
            if task.type == type and task.index == index:
                return task
        raise KeyError(f"{type}:{index} is not part of this cluster")

    def local(self, *, host: str) -> tuple[TaskAddress, ...]:
        return tuple(task for task in self.tasks if task.host == host)

    def cluster_dict(self) -> dict[str, list[str]]:
        jobs: dict[str, list[str]] = {}
        for task in sorted(self.tasks, key=lambda t: (t.type, t.index)):
            jobs.setdefault(task.type, []).append(task.address)
        return jobs

    def tf_config(self, *, task: TaskAddress) -> str:
        """TF_CONFIG for one task, or "" when the trial is a single process."""
        if len(self.tasks) == 1:
            return ""
        return json.dumps(
            {"cluster": self.cluster_dict(), "task": {"type": task.type, "index": task.index}}
        )

    def to_json(self) -> str:
        return json.dumps([task.__dict__ for task in self.tasks])

    @classmethod
    def from_json(cls, text: str) -> ClusterPlan:
        return cls(tuple(TaskAddress(**task) for task in json.loads(text)))


def ports_free(*, host: str, count: int) -> list[int]:
    # All sockets stay bound until every port is chosen, so the kernel cannot hand one out twice.
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def task_kinds(*, resources: Resources) -> list[tuple[str, int]]:
    """The trial's tasks, (type, index), in the order its gang is laid out."""
    kinds = [("worker", i) for i in range(resources.workers)]
    if resources.parameter_servers:
        kinds = [("chief", 0), *kinds, *[("ps", i) for i in range(resources.parameter_servers)]]
    return kinds


def cluster_plan(*, resources: Resources, host: str = LOCALHOST) -> ClusterPlan:
    """Every task of the trial on `host`, with free ports when there is more than one task."""
    kinds = task_kinds(resources=resources)
    ports = ports_free(host=host, count=len(kinds)) if len(kinds) > 1 else [0]
    return ClusterPlan(
        tuple(TaskAddress(t, i, host, port) for (t, i), port in zip(kinds, ports, strict=True))
    )


def gpu_ids_for(*, resources: Resources, task: TaskAddress) -> tuple[int, ...]:
    """The physical GPUs one task may see (CUDA_VISIBLE_DEVICES); none for chief and ps tasks."""
    k = resources.gpus_per_worker
    if task.type != "worker" or k == 0:
        return ()
    granted = resources.gpu_ids or tuple(range(resources.workers * k))
    # Several workers on one node get disjoint slices; on different nodes each starts at its own 0.
    return tuple(granted[task.index * k:(task.index + 1) * k])


def slots_for(*, resources: Resources, task: TaskAddress) -> int:
    """The node's slots one task holds, what its container is sized by: its GPUs, else its
    CPU slots (several only for a GPU-less worker that asked for them)."""
    gpus = len(gpu_ids_for(resources=resources, task=task))
    if gpus:
        return gpus
    return max(1, resources.cpu_slots_per_worker) if task.type == "worker" else 1
