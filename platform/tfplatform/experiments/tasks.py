from celery import shared_task

from tfplatform.cluster.dispatch import SCHEDULER_WAKE_TASK, TRIAL_RUN_TASK
from tfplatform.experiments.services.execution import trial_execute
from tfplatform.experiments.services.scheduling import scheduler_pass


@shared_task(name=TRIAL_RUN_TASK, ignore_result=True)
def trial_run(trial_id: int, node_id: int | None = None) -> None:
    """Supervise this node's part of a trial (the node whose queue this arrived on)."""
    trial_execute(trial_id=trial_id, node_id=node_id)


@shared_task(name=SCHEDULER_WAKE_TASK, ignore_result=True)
def scheduler_wake() -> int:
    """Run a scheduling pass now instead of at the scheduler loop's next tick."""
    return scheduler_pass()
