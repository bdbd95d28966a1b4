"""The scheduler benchmark's cluster and queue, in the database (imported only after
django.setup(), inside bench/scheduler_child.py's process).

50 declared nodes of 8 GPU slots and 4 CPU slots; 1,000 queued experiments of mixed sizes
(1, 2 or 4 workers × 0, 1, 2, 4 or 8 GPUs, with or without a parameter server), priorities 0
and 5, from users of three teams (GPU quotas 64, 128, 1,000) and one without a team (the quota
of a user of their own, PLATFORM_USER_GPU_QUOTA). Every request fits the cluster and its
owner's quota, so the queue can drain completely.
"""

from __future__ import annotations

import random

from django.conf import settings
from django.utils import timezone

from tfplatform.accounts.models import Team, User
from tfplatform.cluster.models import Allocation, Device, Node
from tfplatform.experiments.models import Experiment, Trial

# A CPU-slot quota that never binds: the load measured is that of the GPU quotas alone.
UNBOUNDED = 1_000_000

NODES = 50
GPUS_PER_NODE = 8
CPU_SLOTS_PER_NODE = 4
QUEUED = 1000
WAITING = "Waiting for the scheduler."


def cluster_declare(*, nodes: int = NODES) -> None:
    now = timezone.now()
    declared = Node.objects.bulk_create(
        Node(hostname=f"sim-{i:03d}", queue=f"node.sim-{i:03d}", cpu_count=32,
             last_heartbeat=now)
        for i in range(nodes)
    )
    Device.objects.bulk_create(
        Device(node=node, kind=kind, index=index, name="declared slot", emulated=True)
        for node in declared
        for kind, count in ((Device.Kind.GPU, GPUS_PER_NODE), (Device.Kind.CPU, CPU_SLOTS_PER_NODE))
        for index in range(count)
    )


def nodes_heartbeat() -> None:
    Node.objects.update(last_heartbeat=timezone.now())


def queue_fill(*, seed: int, count: int = QUEUED) -> None:
    rng = random.Random(seed)
    owners = [
        User.objects.create(username=f"sim-user-{quota}",
                            team=Team.objects.create(name=f"sim-team-{quota}", gpu_quota=quota,
                                                     cpu_slot_quota=UNBOUNDED))
        for quota in (64, 128, 1000)
    ]
    owners.append(User.objects.create(username="sim-user-no-team"))
    experiments = []
    for index in range(count):
        owner = rng.choice(owners)
        workers, gpus_per_worker = _size_draw(rng=rng, quota=_quota_of(owner=owner))
        experiments.append(Experiment(
            owner=owner, team=owner.team, name=f"sim-{index}", model="mlp", dataset="digits",
            workers=workers, gpus_per_worker=gpus_per_worker,
            parameter_servers=rng.choice((0, 0, 1)), priority=rng.choice((0, 0, 5)),
            pending_reason=WAITING,
        ))
    Experiment.objects.bulk_create(experiments)


def _quota_of(*, owner: User) -> int:
    return owner.team.gpu_quota if owner.team else settings.PLATFORM.user_gpu_quota


def _size_draw(*, rng: random.Random, quota: int) -> tuple[int, int]:
    """Workers × GPUs per worker, drawn again until it fits the owner's quota: a request over
    it never runs, and the drain would wait for it forever."""
    while True:
        workers, gpus_per_worker = rng.choice((1, 1, 2, 4)), rng.choice((0, 1, 2, 4, 8))
        if workers * gpus_per_worker <= quota:
            return workers, gpus_per_worker


def queue_reset() -> None:
    """Back to 1,000 queued and an idle cluster, as before the first pass."""
    Allocation.objects.all().delete()
    Trial.objects.all().delete()
    Experiment.objects.update(state=Experiment.State.QUEUED, pending_reason=WAITING,
                              started_at=None, finished_at=None)
    nodes_heartbeat()


def trials_end(*, trial_ids: list[int]) -> None:
    """What worker nodes report when trials finish: devices released, experiments done."""
    now = timezone.now()
    Allocation.objects.of_trials().filter(
        holder_id__in=trial_ids, released_at__isnull=True).update(released_at=now)
    Trial.objects.filter(pk__in=trial_ids).update(state=Trial.State.COMPLETED, finished_at=now)
    Experiment.objects.filter(trials__pk__in=trial_ids).update(
        state=Experiment.State.COMPLETED, finished_at=now)


def trials_preempted() -> list[int]:
    """Trials the scheduler asked to stop; a node stops them and they return to the queue."""
    stopping = list(Trial.objects.filter(state=Trial.State.PENDING, stop_reason="preempted")
                    .values_list("pk", flat=True))
    if stopping:
        now = timezone.now()
        Allocation.objects.of_trials().filter(
            holder_id__in=stopping, released_at__isnull=True).update(released_at=now)
        Trial.objects.filter(pk__in=stopping).update(state=Trial.State.CANCELED, finished_at=now)
        Experiment.objects.filter(trials__pk__in=stopping).update(
            state=Experiment.State.QUEUED, pending_reason="Preempted.")
    return stopping
