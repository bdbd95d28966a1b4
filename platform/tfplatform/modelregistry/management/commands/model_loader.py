import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tfplatform.config.celery import app
from tfplatform.modelregistry.dispatch import MODELS_QUEUE
from tfplatform.modelregistry.services import model_versions_loading_resume


class Command(BaseCommand):
    help = ("Load deployed and uploaded model versions into the model server (a Celery worker on "
            "the models queue); it must reach the model server, which trials and nodes cannot.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=1,
                            help="versions loaded at once (each sends the whole model list)")

    def handle(self, *args: Any, **options: Any) -> None:
        resumed = model_versions_loading_resume()
        if resumed:
            self.stdout.write(f"Loading {len(resumed)} version(s) left waiting")
        app.worker_main([
            "worker", f"--hostname=models@{socket.gethostname()}", f"--queues={MODELS_QUEUE}",
            "--pool=threads", f"--concurrency={options['concurrency']}", "--loglevel=INFO",
            "--without-gossip", "--without-mingle",
        ])
