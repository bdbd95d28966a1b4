from celery import shared_task

from tfplatform.cluster.scheduler import scheduler_pass


@shared_task(name="cluster.scheduler_wake", ignore_result=True)
def scheduler_wake() -> int:
    """Run a scheduling pass now instead of at the scheduler loop's next tick."""
    return scheduler_pass()
