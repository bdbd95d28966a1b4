"""Every component of a deployment, as the web app finds it now: the operators' health page
(`/cluster/health/`) and `GET /api/v1/health/` (staff).

    component_health_list()  # [ComponentHealth(name="database", status="ok", ...), ...]

Each check is bounded by a short timeout and reports what failed rather than raising: a page
that answers only when everything works would be no help when something does not.
"""

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from django.conf import settings
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from kombu import Connection

from serving.client import ModelServerClient
from tfplatform.cluster.models import Node, UtilizationSample
from tfplatform.cluster.selectors import heartbeat_fresh_after
from tfplatform.cluster.utilization import SAMPLE_SECONDS

Status = Literal["ok", "degraded", "down"]
CHECK_TIMEOUT_SECONDS = 3.0
# The scheduler samples the cluster every SAMPLE_SECONDS: three missed samples, and it is gone.
SCHEDULER_SILENT_SECONDS = 3 * SAMPLE_SECONDS
DISK_LOW_FRACTION = 0.05
# A name no model may have (names are checked at publish): the server answers 404 for it.
PROBE_MODEL = "tfplatform-health-probe"


@dataclass(frozen=True, kw_only=True)
class ComponentHealth:
    name: str
    status: Status
    detail: str
    seconds: float  # how long the check took


def component_health_list() -> list[ComponentHealth]:
    checks: list[tuple[str, Callable[[], tuple[Status, str]]]] = [
        ("database", _database), ("broker", _broker), ("cache", _cache),
        ("scheduler", _scheduler), ("worker nodes", _nodes), ("model server", _model_server),
        ("storage", _storage),
    ]
    found = []
    for name, check in checks:
        started = time.monotonic()
        try:
            status, detail = check()
        except Exception as error:  # what failed is the finding, not a 500
            status, detail = "down", f"{type(error).__name__}: {str(error)[:300]}"
        found.append(ComponentHealth(name=name, status=status, detail=detail,
                                     seconds=round(time.monotonic() - started, 3)))
    return found


def health_overall(*, components: list[ComponentHealth]) -> Status:
    statuses = {component.status for component in components}
    return "down" if "down" in statuses else "degraded" if "degraded" in statuses else "ok"


def _database() -> tuple[Status, str]:
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version" if connection.vendor == "postgresql"
                       else "SELECT sqlite_version()")
        version = cursor.fetchone()[0]
    executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        # An upgrade half done: the code expects tables the database does not have yet.
        return "degraded", f"{len(pending)} migration(s) not applied: run manage.py migrate"
    return "ok", f"{connection.vendor} {version}, every migration applied"


def _broker() -> tuple[Status, str]:
    with Connection(settings.CELERY_BROKER_URL, connect_timeout=CHECK_TIMEOUT_SECONDS) as broker:
        broker.ensure_connection(max_retries=1, timeout=CHECK_TIMEOUT_SECONDS)
        return "ok", f"{broker.transport_cls} broker reachable"


def _cache() -> tuple[Status, str]:
    key, value = "tfplatform:health", str(time.time())
    cache.set(key, value, timeout=60)
    if cache.get(key) != value:
        return "down", "a value written could not be read back"
    return "ok", "a value written was read back"


def _scheduler() -> tuple[Status, str]:
    last = UtilizationSample.objects.order_by("-recorded_at").values_list(
        "recorded_at", flat=True).first()
    if last is None:
        return "down", "no scheduling pass recorded yet: is `manage.py scheduler` running?"
    silent = (timezone.now() - last).total_seconds()
    if silent > SCHEDULER_SILENT_SECONDS:
        return "down", (f"last sample {int(silent)} s ago (one is taken every "
                        f"{int(SAMPLE_SECONDS)} s): is `manage.py scheduler` running?")
    return "ok", f"last sample {max(int(silent), 0)} s ago"


def _nodes() -> tuple[Status, str]:
    nodes = Node.objects.all()
    online = nodes.filter(state=Node.State.READY, last_heartbeat__gte=heartbeat_fresh_after())
    silent = nodes.exclude(state=Node.State.LOST).exclude(
        last_heartbeat__gte=heartbeat_fresh_after())
    lost = nodes.filter(state=Node.State.LOST)
    counts = (f"{online.count()} ready of {nodes.count()}; {silent.count()} silent, "
              f"{lost.count()} lost")
    if not online.exists():
        return "down", f"no node takes trials ({counts})"
    if silent.exists() or lost.exists():
        names = ", ".join(sorted({*silent.values_list("hostname", flat=True),
                                  *lost.values_list("hostname", flat=True)})[:10])
        return "degraded", f"{counts}: {names}"
    return "ok", counts


def _model_server() -> tuple[Status, str]:
    config = settings.PLATFORM
    with ModelServerClient(grpc_target=config.tf_serving_grpc, rest_url=config.tf_serving_rest,
                           timeout=CHECK_TIMEOUT_SECONDS,
                           access_token=config.tf_serving_access_token) as client:
        client.model_status(name=PROBE_MODEL)
    return "ok", f"answering at {config.tf_serving_rest}"


def _storage() -> tuple[Status, str]:
    config = settings.PLATFORM
    folders = {"models": config.model_base_path, "work": config.work_dir,
               "datasets": config.datasets_dir, "uploads": Path(settings.MEDIA_ROOT)}
    low, described = [], []
    for name, folder in folders.items():
        usage = shutil.disk_usage(_existing(folder))
        free = usage.free / usage.total if usage.total else 0.0
        described.append(f"{name} {usage.free // 2**30} GiB free")
        if free < DISK_LOW_FRACTION:
            low.append(f"{name} ({folder}) {free:.0%} free")
    if low:
        return "degraded", "low on space: " + ", ".join(low)
    return "ok", ", ".join(described)


def _existing(folder: Path) -> Path:
    """The folder, or its nearest existing parent (a folder made on first use)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder
