"""A trial's TF cluster across nodes: which task runs where, and on which port (a read: each
node claims its own part with cluster.services.allocations_claim_part).

A gang on one node needs nothing from us (the supervisor picks free local ports). A gang that
spans nodes gets ports derived from its allocation ids, so every node computes the same plan
without talking to the others; ids of live allocations are unique, and so are their ports.
"""

from django.conf import settings

from tfplatform.cluster.models import Allocation
from tfplatform.experiments.models import Trial
from training.tf_config import ClusterPlan, TaskAddress


def _port(*, offset: int, key: int) -> int:
    base, span = settings.PLATFORM.task_port_base, settings.PLATFORM.task_port_span
    return base + offset * span + key % span


def trial_cluster_plan(*, trial: Trial) -> ClusterPlan | None:
    """The whole gang's plan when it spans nodes; None when it all runs on one node."""
    allocations = list(Allocation.objects.filter(trial=trial).select_related("node").order_by("pk"))
    if len({a.node_id for a in allocations}) <= 1:
        return None
    first: dict[tuple[str, int], Allocation] = {}
    for allocation in allocations:
        first.setdefault((allocation.task_type, allocation.task_index), allocation)
    tasks = [
        TaskAddress(task_type, index, a.node.address, _port(offset=0, key=a.pk))
        for (task_type, index), a in sorted(first.items())
    ]
    if trial.experiment.parameter_servers:
        # The coordinator holds no devices; it runs beside worker 0.
        worker0 = first[("worker", 0)]
        tasks.insert(
            0, TaskAddress("chief", 0, worker0.node.address, _port(offset=1, key=trial.pk))
        )
    return ClusterPlan(tuple(tasks), dispatch_key=f"{allocations[0].created_at.timestamp():.6f}")
