"""Messages to workers: a scheduled trial to the nodes that hold its devices, one message per
node; and a scheduling pass when something changed what can be placed. Tasks are sent by name:
the experiments app defines them, and the cluster app does not import it."""

from celery import current_app
from django.db import transaction

from tfplatform.cluster.models import Allocation, Node

SCHEDULER_WAKE_TASK = "cluster.scheduler_wake"
TRIAL_RUN_TASK = "experiments.trial_run"


def scheduler_wake_on_commit() -> None:
    """A scheduling pass as soon as this transaction commits: a submitted experiment, ended
    trial, or node that became ready is acted on now, not at the scheduler loop's next tick."""
    # Robust: with the broker away the change still stands (the answer is not a 500), and the
    # scheduler's own loop acts on it a few seconds later.
    transaction.on_commit(lambda: current_app.send_task(SCHEDULER_WAKE_TASK), robust=True)


def trial_dispatch(*, trial_id: int) -> None:
    node_ids = sorted(
        set(Allocation.objects.of_trial(trial_id=trial_id).values_list("node_id", flat=True))
    )
    for node in Node.objects.filter(pk__in=node_ids).order_by("pk"):
        current_app.send_task(TRIAL_RUN_TASK, args=[trial_id, node.pk], queue=node.queue)
