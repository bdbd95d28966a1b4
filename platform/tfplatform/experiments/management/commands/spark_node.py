import argparse
import logging
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tfplatform.cluster.models import SparkCluster
from tfplatform.cluster.spark import spark_node_register
from tfplatform.config.celery import app
from tfplatform.experiments.management.commands.worker import (
    celery_worker_argv,
    node_heartbeat_loop,
)
from tfplatform.experiments.services.execution import node_restart_recover

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = ("Serve a registered Spark cluster as a node: offer its slots in pool spark-NAME and "
            "run each trial placed there as a Spark application.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="The Spark cluster's name.")
        parser.add_argument(
            "--address", default=settings.PLATFORM.node_address,
            help="Host name or IP the cluster's executors reach this process at (each trial's "
                 "tasks send their events and output there).")
        parser.add_argument(
            "--scheduler-queue", action=argparse.BooleanOptionalAction, default=True,
            help="Also consume the shared 'platform' queue (scheduler wake-ups).")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = SparkCluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            raise CommandError(f"No Spark cluster named {options['cluster']!r} is registered "
                               "(staff register one: POST /api/v1/spark-clusters/).")
        node = spark_node_register(cluster=cluster, address=options["address"])
        self.stdout.write(f"Spark cluster {cluster.name} ({cluster.master}): pool {node.pool}, "
                          f"{cluster.task_slots} task slot(s), {cluster.gpus} GPU(s), "
                          f"queue {node.queue}")
        recovered = node_restart_recover(node=node)
        if recovered:
            self.stdout.write(f"Requeued {len(recovered)} trial(s) this node held before")
        stop = threading.Event()
        threading.Thread(target=node_heartbeat_loop, kwargs={"hostname": node.hostname,
                                                             "stop": stop},
                         daemon=True).start()
        try:
            app.worker_main(celery_worker_argv(
                hostname=node.hostname, node_queue=node.queue,
                scheduler_queue=options["scheduler_queue"],
                concurrency=cluster.task_slots + 1))
        finally:
            stop.set()
