"""Settings every gunicorn here reads (it loads ./gunicorn.conf.py by default): the Procfile's
web process, the image, compose and bench/ all start it from the repository root."""

import os
import shutil
import tempfile
from pathlib import Path

# A worker proves it is alive by touching a file in worker_tmp_dir on every loop; on a
# disk-backed /tmp that is a metadata write per request (a few % of the web process's CPU in
# the inference benchmark). gunicorn's own docs recommend /dev/shm for the same reason; it makes
# the file with mkstemp (unique name, mode 0600), so a shared directory is safe.
SHM = "/dev/shm"  # noqa: S108
worker_tmp_dir = SHM if os.path.isdir(SHM) else None

# prometheus-client's multiprocess mode: each worker writes its metrics to files in this folder
# and /metrics sums them over all workers. It must be set before a worker imports the client,
# hence here, in the master, which the workers inherit it from. Given (compose: a tmpfs) it is
# emptied at start; otherwise this master makes a private one and removes it on exit.
_given = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
METRICS_DIR = Path(_given or tempfile.mkdtemp(prefix="tfplatform-metrics-", dir=worker_tmp_dir))
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(METRICS_DIR)


def on_starting(server: object) -> None:
    """A previous run's files would add its counts to this one's (prometheus-client's docs:
    wipe the folder between runs)."""
    METRICS_DIR.mkdir(parents=True, exist_ok=True)
    for path in METRICS_DIR.glob("*.db"):
        path.unlink(missing_ok=True)


def child_exit(server: object, worker: object) -> None:
    """A worker that exits leaves its counters (they still count) but not its live gauges."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[attr-defined]


def on_exit(server: object) -> None:
    if not _given:
        shutil.rmtree(METRICS_DIR, ignore_errors=True)
