import logging
import socket
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from tfplatform.config.celery import app
from tfplatform.modelregistry.dispatch import MODELS_QUEUE
from tfplatform.modelregistry.services.publish import model_files_leftovers_remove
from tfplatform.modelregistry.services.sync import model_config_ensure
from tfplatform.modelregistry.services.versions import model_versions_loading_resume

logger = logging.getLogger(__name__)
TIDY_SECONDS = 300.0
# Longer than a load takes, so a version being loaded is not sent again.
STUCK_LOADING_SECONDS = 600.0


class Command(BaseCommand):
    help = ("Load deployed and uploaded model versions into the model server (a Celery worker on "
            "the models queue); it must reach the model server, which trials and nodes cannot.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=1,
                            help="versions loaded at once (each sends the whole model list)")

    def handle(self, *args: Any, **options: Any) -> None:
        # TF Serving does not start without its config file, even before any model is deployed.
        model_config_ensure()
        resumed = model_versions_loading_resume()
        if resumed:
            self.stdout.write(f"Loading {len(resumed)} version(s) left waiting")
        stop = threading.Event()
        threading.Thread(target=_tidy_loop, kwargs={"stop": stop}, daemon=True).start()
        try:
            app.worker_main([
                "worker", f"--hostname=models@{socket.gethostname()}", f"--queues={MODELS_QUEUE}",
                "--pool=threads", f"--concurrency={options['concurrency']}", "--loglevel=INFO",
                "--without-gossip", "--without-mingle",
            ])
        finally:
            stop.set()


def _tidy_loop(*, stop: threading.Event) -> None:
    """What interrupted publishes left on disk goes, and versions whose message was lost (the
    broker was away) are loaded: at start, then every few minutes."""
    first = True  # handle() has just sent whatever waits LOADING
    while True:
        try:
            removed = model_files_leftovers_remove()
            if removed:
                logger.warning("Removed %d leftover(s) of interrupted publishes", len(removed))
            resent = [] if first else model_versions_loading_resume(
                older_than=STUCK_LOADING_SECONDS)
            if resent:
                logger.warning("Sent %d version(s) stuck loading to be loaded again", len(resent))
        except Exception:
            logger.exception("Tidying the model files failed")
        finally:
            close_old_connections()
        first = False
        if stop.wait(TIDY_SECONDS):
            return
