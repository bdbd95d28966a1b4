from celery import Task, shared_task

from tfplatform.notifications.dispatch import DELIVERY_TASK
from tfplatform.notifications.services import delivery_attempt


# Each attempt is one message, and a failed one is sent again after the wait its delivery
# names (exponential, bounded: services.delivery_attempt), so a waiting delivery holds no
# thread of the notifier. The delivery counts its own attempts; retries here are unbounded.
@shared_task(name=DELIVERY_TASK, bind=True, ignore_result=True, max_retries=None)
def delivery_attempt_task(self: Task, delivery_id: int) -> None:
    retry_in = delivery_attempt(delivery_id=delivery_id)
    if retry_in is not None:
        raise self.retry(countdown=retry_in)
