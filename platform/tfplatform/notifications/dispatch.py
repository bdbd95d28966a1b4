"""Messages to the notifier: each delivery's attempt, once the transaction that made it commits.
Sent by name, as cluster.dispatch does: tasks.py runs the services that call this."""

from functools import partial

from celery import current_app
from django.db import transaction

NOTIFICATIONS_QUEUE = "notifications"
DELIVERY_TASK = "notifications.delivery_attempt"


def deliveries_send_on_commit(*, delivery_ids: list[int]) -> None:
    # Robust: with the broker away the deliveries stay pending, and the notifier sends them
    # again (services.deliveries_resend_overdue); the publisher's change stands either way.
    if delivery_ids:
        transaction.on_commit(partial(_deliveries_send, delivery_ids=delivery_ids), robust=True)


def _deliveries_send(*, delivery_ids: list[int]) -> None:
    with current_app.producer_or_acquire() as producer:
        for delivery_id in delivery_ids:
            current_app.send_task(DELIVERY_TASK, args=[delivery_id], queue=NOTIFICATIONS_QUEUE,
                                  producer=producer)
