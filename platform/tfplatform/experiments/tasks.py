from celery import shared_task

from tfplatform.experiments.execution import trial_execute


@shared_task(name="experiments.trial_run", ignore_result=True, acks_late=True)
def trial_run(trial_id: int, node_id: int | None = None) -> None:
    """Supervise this node's part of a trial (the node whose queue this arrived on)."""
    trial_execute(trial_id=trial_id, node_id=node_id)
