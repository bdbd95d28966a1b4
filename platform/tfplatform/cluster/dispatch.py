"""Messages to workers: a scheduled trial to the nodes that hold its devices, one message per
node; and a scheduling pass when something changed what can be placed."""

from django.db import transaction

from tfplatform.cluster.models import Allocation, Node


def scheduler_wake_on_commit() -> None:
    """A scheduling pass as soon as this transaction commits: a submitted experiment, ended
    trial, or node that became ready is acted on now, not at the scheduler loop's next tick."""
    from tfplatform.cluster.tasks import scheduler_wake

    transaction.on_commit(lambda: scheduler_wake.delay())


def trial_dispatch(*, trial_id: int) -> None:
    from tfplatform.experiments.tasks import trial_run

    node_ids = sorted(
        set(Allocation.objects.filter(trial_id=trial_id).values_list("node_id", flat=True))
    )
    for node in Node.objects.filter(pk__in=node_ids).order_by("pk"):
        trial_run.apply_async(args=[trial_id, node.pk], queue=node.queue)
