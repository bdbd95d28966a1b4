import logging
import socket
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from tfplatform.config.celery import app
from tfplatform.notifications.dispatch import NOTIFICATIONS_QUEUE
from tfplatform.notifications.services import deliveries_resend_overdue, events_prune

logger = logging.getLogger(__name__)
TIDY_SECONDS = 60.0


class Command(BaseCommand):
    help = ("Deliver notifications, webhooks and email: a Celery worker on the notifications "
            "queue. Each attempt holds one of its threads for at most its timeouts, so a "
            "receiver that never answers holds only its own delivery.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=8,
                            help="deliveries attempted at once")

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()
        threading.Thread(target=_tidy_loop, kwargs={"stop": stop}, daemon=True).start()
        try:
            app.worker_main([
                "worker", f"--hostname=notifier@{socket.gethostname()}",
                f"--queues={NOTIFICATIONS_QUEUE}", "--pool=threads",
                f"--concurrency={options['concurrency']}", "--loglevel=INFO",
                "--without-gossip", "--without-mingle",
            ])
        finally:
            stop.set()


def _tidy_loop(*, stop: threading.Event) -> None:
    """Deliveries whose message was lost (the broker was away, a notifier stopped holding
    their retry) are sent again, and the log's old events go: at start, then every minute."""
    while True:
        try:
            resent = deliveries_resend_overdue()
            if resent:
                logger.warning("Sent %d overdue delivery(ies) again", len(resent))
            events_prune()
        except Exception:
            logger.exception("Tidying the notifications failed")
        finally:
            close_old_connections()
        if stop.wait(TIDY_SECONDS):
            return
