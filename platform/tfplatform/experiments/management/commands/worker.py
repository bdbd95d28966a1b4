import argparse
import logging
import os
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections

from tfplatform.cluster.discovery import (
    DeviceInfo,
    devices_discover,
    gpus_utilization,
    memory_total_bytes,
    work_disk_free_bytes,
)
from tfplatform.cluster.models import Node
from tfplatform.cluster.placement import KIND_GPU
from tfplatform.cluster.services import (
    node_heartbeat,
    node_register,
)
from tfplatform.config.celery import app
from tfplatform.core.database import DATABASE_ERRORS, database_connection_reset
from tfplatform.core.errors import InvalidInput
from tfplatform.experiments.services.execution import node_restart_recover, node_runtime
from tfplatform.experiments.sessions import sessions_node_start
from training.errors import NodeUnfit
from training.isolation.container_settings import RUNTIME_IMAGE
from training.isolation.containers import containers_reap, runtime_image_ensure
from training.isolation.gang_network import gang_networks_reap
from training.isolation.runtime import CONTAINER_RUNTIMES, TaskPython, node_privileged
from training.isolation.sandbox import Exposure
from training.supervisor.forks import fork_server, fork_server_used
from training.supervisor.gpus import gpus_usable_check
from training.supervisor.supervise import task_base_environment
from training.supervisor.warm import warm_pool_configure

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Start this machine's worker node: register it and its devices, heartbeat, run Celery."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--node", default=settings.PLATFORM.node_name)
        parser.add_argument(
            "--gpu-slots",
            type=int,
            default=settings.PLATFORM.declared_gpu_slots,
            help="Accelerator slots to declare when NVML finds no GPU.",
        )
        parser.add_argument(
            "--cpu-slots", type=int, default=2, help="How many CPU-only tasks may run here at once."
        )
        parser.add_argument("--concurrency", type=int, default=None)
        parser.add_argument(
            "--warm-processes",
            type=int,
            default=settings.PLATFORM.warm_trial_processes,
            help="Task processes kept ready with TensorFlow imported; 0 starts every task cold.",
        )
        parser.add_argument(
            "--address",
            default=settings.PLATFORM.node_address,
            help="Host name or IP other nodes reach this node's TF tasks at.",
        )
        parser.add_argument(
            "--scheduler-queue",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="Also consume the shared 'platform' queue (scheduler wake-ups); "
            "--no-scheduler-queue leaves them to other nodes.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        hostname = options["node"]
        devices = devices_discover(
            declared_gpu_slots=options["gpu_slots"], cpu_slots=options["cpu_slots"]
        )
        real_gpus = [d for d in devices if d.kind == KIND_GPU and not d.emulated]
        if real_gpus and settings.PLATFORM.trial_runtime not in CONTAINER_RUNTIMES:
            # Under docker and podman the image's TensorFlow runs the tasks: a trial there that
            # sees fewer GPUs than it holds fails, saying so (training/trial/strategy.py).
            try:
                gpus_usable_check(nvml_gpus=len(real_gpus), python=TaskPython())
            except NodeUnfit as error:
                raise CommandError(f"Node {hostname} does not join: {error}") from error
        try:
            node = _node_register(hostname=hostname, devices=devices, address=options["address"])
        except InvalidInput as error:  # a malformed pool or label in its configuration
            raise CommandError(f"Node {hostname} does not join: {error.message}") from error
        self.stdout.write(f"Node {hostname}: {len(devices)} device(s), queue {node.queue}")
        if not node.isolated:
            logger.warning(
                "Trials on node %s are NOT isolated (PLATFORM_TRIAL_RUNTIME=%s): user code runs "
                "as this worker's user, with its files and network. Development only.",
                hostname,
                node.trial_runtime,
            )
        runtime = node_runtime(node=node)
        if runtime.containers is not None:
            reaped = containers_reap(settings=runtime.containers)
            if reaped:
                self.stdout.write(f"Removed {reaped} container(s) this node left running")
            if runtime.containers.node_image == RUNTIME_IMAGE:
                runtime_image_ensure(settings=runtime.containers)
        elif runtime.name == "sandbox" and runtime.gang_subnet and node_privileged():
            gone = gang_networks_reap()
            if gone:
                self.stdout.write(f"Removed {len(gone)} gang network(s) this node left behind")
        recovered = node_restart_recover(node=node)
        if recovered:
            self.stdout.write(
                f"Requeued {len(recovered)} trial(s) this node held before restarting"
            )
        # Before the node takes a session (the workspaces' relay: the lab reaches them by it).
        sessions_node_start(address=options["address"])
        stop = threading.Event()
        threading.Thread(
            target=node_heartbeat_loop, kwargs={"hostname": hostname, "stop": stop}, daemon=True
        ).start()
        argv = celery_worker_argv(
            hostname=hostname,
            node_queue=node.queue,
            scheduler_queue=options["scheduler_queue"],
            # One slot per device plus one for scheduler wake-ups: trials mostly wait on children.
            concurrency=options["concurrency"] or len(devices) + 1,
        )
        warm_processes = options["warm_processes"]
        if fork_server_used(runtime=runtime):
            # Its tasks are forked from one process that imported TensorFlow once
            # (training/supervisor/forks.py): a host kept warm would only cost another import.
            warm_processes = 0
            # Its import starts now, as a warm pool's would: the node's first trial would
            # otherwise wait for it, and start no sooner than a cold one.
            try:
                fork_server(runtime=runtime, python=TaskPython(), env=task_base_environment())
            except OSError:
                # The node still runs: its first trial tries again (forks.fork_server), and its
                # tasks start cold if that fails too.
                logger.warning("Node %s could not start its fork server now", hostname,
                               exc_info=True)
        elif runtime.isolated and warm_processes and not node_privileged():
            # A warm host is started before its trial is known, so it may hold nothing of
            # anyone; only a node that can mount a task's folders into it at its order (root,
            # training/isolation/mounts.py) keeps any. Elsewhere every host is made for its task.
            logger.warning("Node %s is not run as root: no warm task hosts.", hostname)
            warm_processes = 0
        warm = warm_pool_configure(
            size=warm_processes,
            runtime=runtime,
            env=task_base_environment(),
            exposure=_warm_exposure(),
            log_dir=settings.PLATFORM.run_dir / "warm" / hostname,
            idle=settings.PLATFORM.warm_idle_priority,
        )
        try:
            app.worker_main(argv)
        finally:
            stop.set()
            if warm is not None:
                warm.close()
            if runtime.containers is not None:
                containers_reap(settings=runtime.containers)


def celery_worker_argv(
    *, hostname: str, node_queue: str, scheduler_queue: bool, concurrency: int
) -> list[str]:
    queues = [node_queue, settings.CELERY_TASK_DEFAULT_QUEUE] if scheduler_queue else [node_queue]
    return [
        "worker",
        f"--hostname={hostname}@%h",
        f"--queues={','.join(queues)}",
        "--pool=threads",
        f"--concurrency={concurrency}",
        "--loglevel=INFO",
        "--without-gossip",
        "--without-mingle",
    ]


def _warm_exposure() -> Exposure:
    """What a warm sandbox shows before its trial is known; its order narrows it (Landlock,
    `confinement/`)."""
    work = Path(settings.PLATFORM.work_dir)
    read = [Path(settings.MEDIA_ROOT), settings.PLATFORM.datasets_dir,
            settings.PLATFORM.shared_dir, *settings.PLATFORM.dataset_roots]
    # A sandbox mounts only what exists when it starts: an uploads folder made by the first
    # upload would stay invisible to every host started before it.
    for path in (work, *read):
        Path(path).mkdir(parents=True, exist_ok=True)
    return Exposure(write=(str(work),), read=tuple(str(path) for path in read))


def node_heartbeat_loop(*, hostname: str, stop: threading.Event) -> None:
    interval = settings.PLATFORM.heartbeat_seconds
    while not stop.wait(interval):
        try:
            node_heartbeat(hostname=hostname, work_disk_free_bytes=work_disk_free_bytes(),
                           gpu_utilization=gpus_utilization())
        except DATABASE_ERRORS:
            # The database is away: the next beat tries again. An exception here would end
            # the thread, and a node that stops beating is lost once the database is back.
            logger.warning("Node %s: the database is unavailable; heartbeat skipped", hostname)
            database_connection_reset()
        finally:
            close_old_connections()


def _node_register(*, hostname: str, devices: list[DeviceInfo], address: str) -> Node:
    return node_register(
        hostname=hostname,
        cpu_count=os.cpu_count() or 1,
        memory_bytes=memory_total_bytes(),
        devices=devices,
        trial_runtime=settings.PLATFORM.trial_runtime,
        address=address,
        work_disk_free_bytes=work_disk_free_bytes(),
        pool=settings.PLATFORM.node_pool,
        labels=settings.PLATFORM.node_labels,
        gpu_type=settings.PLATFORM.gpu_type,
    )
