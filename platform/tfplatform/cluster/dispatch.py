"""Messages to workers: a scheduled trial to the nodes that hold its devices, one message per
node; and a scheduling pass when something changed what can be placed. Tasks are sent by name:
the experiments app defines them, and the cluster app does not import it."""

from contextlib import AbstractContextManager
from typing import Any, cast

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
    nodes = Node.objects.filter(pk__in=node_ids).order_by("pk").values_list("pk", "queue")
    trial_dispatch_to(trial_id=trial_id, nodes=list(nodes))


def trial_dispatch_to(*, trial_id: int, nodes: list[tuple[int, str]],
                      producer: Any = None) -> None:
    """One message per node, (node id, its queue), when the sender knows them already (a
    scheduling pass placed the trial on them). `producer`: one a sender of many holds
    (dispatch_producer), instead of one taken from the pool per message."""
    for node_id, queue in nodes:
        current_app.send_task(TRIAL_RUN_TASK, args=[trial_id, node_id], queue=queue,
                              producer=producer)


def dispatch_producer() -> AbstractContextManager[Any]:
    """A broker producer held across many messages (a scheduling pass's trials)."""
    return cast(AbstractContextManager[Any], current_app.producer_or_acquire())
