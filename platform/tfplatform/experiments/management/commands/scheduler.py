import logging
import signal
import threading
import time
from typing import Any

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from tfplatform.cluster.services import nodes_finish_draining
from tfplatform.cluster.utilization import SAMPLE_SECONDS, utilization_record
from tfplatform.core.database import DATABASE_ERRORS, database_connection_reset
from tfplatform.core.liveness import liveness_beat
from tfplatform.experiments.selectors.experiments import experiment_state_counts
from tfplatform.experiments.services.execution import nodes_lost_handle
from tfplatform.experiments.services.scheduling import scheduler_pass, trials_dispatch_overdue
from tfplatform.experiments.services.submission import uploads_leftovers_remove
from tfplatform.experiments.signals import scheduler_passed, scheduler_passing

logger = logging.getLogger(__name__)
TIDY_SECONDS = 300.0


class Command(BaseCommand):
    help = "Run the scheduler loop: place queued experiments on free devices every interval."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval", type=float, default=settings.PLATFORM.scheduler_interval_seconds
        )
        parser.add_argument("--once", action="store_true", help="Run one pass and exit.")

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write(f"Scheduler running every {options['interval']}s")
        # Monotonic, so a wall-clock jump neither floods nor starves the utilization history.
        next_sample = next_tidy = time.monotonic()
        # Nobody could beat while the database was away: once it is back, every node gets a
        # whole NODE_LOST_SECONDS to beat again before it can be judged lost.
        judge_nodes_after = time.monotonic()
        while not stop.is_set():
            try:
                if time.monotonic() >= judge_nodes_after:
                    lost = nodes_lost_handle()
                    if lost:
                        logger.warning("Marked %d node(s) lost", len(lost))
                nodes_finish_draining()
                ContentType.objects.clear_cache()  # see config/celery.py
                scheduler_passing.send(sender=self.__class__)
                scheduled = scheduler_pass()
                if scheduled:
                    logger.info("Scheduled %d experiment(s)", scheduled)
                scheduler_passed.send_robust(sender=self.__class__)
                liveness_beat()
                resent = trials_dispatch_overdue()
                if resent:
                    logger.warning("Dispatched %d trial(s) again that no node took up", resent)
                if time.monotonic() >= next_sample:
                    next_sample = time.monotonic() + SAMPLE_SECONDS
                    utilization_record(**experiment_state_counts())
                if time.monotonic() >= next_tidy:
                    next_tidy = time.monotonic() + TIDY_SECONDS
                    removed = uploads_leftovers_remove()
                    if removed:
                        logger.warning("Removed %d upload(s) no experiment names", len(removed))
            except DATABASE_ERRORS:
                logger.warning("The database is unavailable; the scheduler waits for it")
                database_connection_reset()
                judge_nodes_after = time.monotonic() + settings.PLATFORM.node_lost_seconds
            except Exception:
                # One bad pass must not end the loop.
                logger.exception("Scheduler pass failed")
            finally:
                close_old_connections()
            if options["once"]:
                break
            stop.wait(options["interval"])
