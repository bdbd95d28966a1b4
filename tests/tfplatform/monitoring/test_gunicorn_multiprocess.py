"""The web process as deployed (gunicorn, the Procfile's two workers, ./gunicorn.conf.py):
/metrics, answered by whichever worker, sums every worker's counts (prometheus-client's
multiprocess mode); a worker that exits keeps its counts; a previous run's files are wiped."""

import os
import tempfile
import time
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from bench.stack import web_args
from tests import live

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
# Where gunicorn.conf.py makes its folder when none is given (its worker_tmp_dir).
SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
HEALTHZ = "django_http_requests_total_by_view_transport_method_total"
TOKEN = "a-metrics-token"


def healthz_count(base: str) -> float:
    answer = requests.get(f"{base}/metrics", timeout=10,
                          headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200, answer.status_code
    text = answer.text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == HEALTHZ and sample.labels.get("view") == "healthz"
    )


def _settled(base: str) -> float:
    """The count once the wait's polls have landed: a poll the client gave up on (after
    live.http_status's 10 s) is counted when the loaded server gets to it; taken as done when
    two reads 3 s apart agree."""
    last = healthz_count(base)
    while True:
        time.sleep(3)
        now = healthz_count(base)
        if now == last:
            return now
        last = now


def worker_pids(folder: Path) -> set[str]:
    return {path.stem.rsplit("_", 1)[1] for path in folder.glob("counter_*.db")}


def test_metrics_sum_all_gunicorn_workers_and_survive_a_worker_exit(tmp_path: Path) -> None:
    folder = tmp_path / "prometheus"
    folder.mkdir()
    # A previous run's file, not even valid: read, it would break the scrape.
    (folder / "counter_1.db").write_bytes(b"stale")
    port = live.free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "web.log"
    env = live.child_env(PROMETHEUS_MULTIPROC_DIR=str(folder), PLATFORM_VAR_DIR=str(tmp_path),
                         PLATFORM_METRICS_TOKEN=TOKEN)
    web = live.start(web_args(port=port), env=env, log=log)
    try:
        live.wait_for(lambda: live.http_status(f"{base}/healthz") == 200, timeout=90,
                      what="gunicorn", log=log)
        # What the wait sent and the server counted: under load a poll may time out here and
        # still be answered and counted there, so not always one, and perhaps not yet.
        sent = _settled(base)
        assert sent >= 1
        # New connections until both workers have answered some (the kernel picks the worker).
        deadline = time.monotonic() + 60
        while len(worker_pids(folder) - {"1"}) < 2 and time.monotonic() < deadline:
            requests.get(f"{base}/healthz", timeout=10, headers={"Connection": "close"})
            sent += 1
        pids = worker_pids(folder)
        assert len(pids) >= 2 and "1" not in pids, pids  # two workers wrote, the stale file is gone
        for _ in range(4):  # any worker answering the scrape reports them all
            assert healthz_count(base) == sent

        victim = int(sorted(pids)[0])
        os.kill(victim, 15)
        live.wait_for(lambda: not Path(f"/proc/{victim}").exists(), timeout=30,
                      what="the worker to exit")
        assert healthz_count(base) == sent  # its counters still count
    finally:
        live.stop(web)
    assert (folder / f"counter_{victim}.db").exists()  # a given folder is the operator's


def test_without_a_folder_given_gunicorn_makes_its_own_and_removes_it(tmp_path: Path) -> None:
    port = live.free_port()
    log = tmp_path / "web.log"
    env = live.child_env(PLATFORM_VAR_DIR=str(tmp_path), PLATFORM_METRICS_TOKEN=TOKEN)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    before = set(SHM.glob("tfplatform-metrics-*"))
    web = live.start(web_args(port=port), env=env, log=log)
    try:
        live.wait_for(lambda: live.http_status(f"http://127.0.0.1:{port}/healthz") == 200,
                      timeout=90, what="gunicorn", log=log)
        assert healthz_count(f"http://127.0.0.1:{port}") >= 1
        # Other workers' gunicorns may make folders of their own meanwhile: this one's holds
        # the files of its workers (processes of its master).
        workers = set(Path(f"/proc/{web.pid}/task/{web.pid}/children").read_text().split())
        made = {folder for folder in set(SHM.glob("tfplatform-metrics-*")) - before
                if worker_pids(folder) & workers}
        assert len(made) == 1
    finally:
        live.stop(web)
    assert not any(path.exists() for path in made)
