"""Sending a scheduled trial to the nodes that hold its devices: one message per node."""

from tfplatform.cluster.models import Allocation, Node


def trial_dispatch(*, trial_id: int) -> None:
    from tfplatform.experiments.tasks import trial_run

    node_ids = sorted(
        set(Allocation.objects.filter(trial_id=trial_id).values_list("node_id", flat=True))
    )
    for node in Node.objects.filter(pk__in=node_ids).order_by("pk"):
        trial_run.apply_async(args=[trial_id, node.pk], queue=node.queue)
