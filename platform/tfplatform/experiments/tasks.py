from celery import shared_task

from tfplatform.experiments.execution import trial_execute


@shared_task(name="experiments.trial_run", ignore_result=True, acks_late=True)
def trial_run(trial_id: int) -> None:
    """Supervise one trial on the node whose queue this arrived on."""
    trial_execute(trial_id=trial_id)
