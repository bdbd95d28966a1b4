"""Fixtures for tests that need live processes: a worker node, the embedded model server.

A plugin (tests/conftest.py's pytest_plugins) so that every folder's tests share one definition.
The model server is started once per session (per xdist worker, each with its own database,
var folder and broker keys); a worker node once per module (see worker_node_process). Each test
still finds them as if fresh."""

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.db.models.functions import Now

from tests import live
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.cluster.models import Device, Node
from tfplatform.modelregistry.server import _client
from tfplatform.modelregistry.services.access import serving_access_push

FLUSH_ATTEMPTS = 3
# The model server's front is on, as `make run` has it, refreshed faster than there (5 s): a
# test of the refresh waits for it.
FRONT_REFRESH_SECONDS = 1.0


def pytest_configure(config: pytest.Config) -> None:
    """A transactional test's flush (TRUNCATE of every table) may meet a live process's last
    writes: a node's thread still recording a trial that the test saw finish, the scheduling
    pass its end woke. PostgreSQL then ends one of the two as a deadlock's victim; when that is
    the flush, nothing of it was done, and flushing again is what the test's teardown needs."""
    from django.core.management.base import CommandError
    from django.test.testcases import TransactionTestCase

    flush = TransactionTestCase._fixture_teardown

    def flush_retrying_deadlocks(self: TransactionTestCase) -> None:
        for attempt in range(1, FLUSH_ATTEMPTS + 1):
            try:
                return flush(self)
            except CommandError as error:
                if attempt == FLUSH_ATTEMPTS or "deadlock detected" not in str(error.__cause__):
                    raise

    TransactionTestCase._fixture_teardown = flush_retrying_deadlocks  # type: ignore[method-assign]


@pytest.fixture(scope="session", autouse=True)
def _own_task_roots(tmp_path_factory: pytest.TempPathFactory) -> None:
    from django.conf import settings

    live.OWN_ROOTS[:] = [f"{tmp_path_factory.getbasetemp().resolve()}/",
                         f"{Path(settings.VAR_DIR).resolve()}/"]


@pytest.fixture(scope="module")
def worker_node_process(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
    django_db_setup: None, django_db_blocker: Any
) -> Iterator[dict[str, Any]]:
    """One worker node per module: starting one (Django, Celery, maybe a warm TF host) and stopping
    it cost more than many of the tests that use it. What it registered is kept to be put back
    after each test's flush (`worker_node`); each test's trials run on it as on a fresh one.
    Not one per session: a node also takes the platform queue's tasks (scheduler wake-ups,
    search steps), and would take them from the nodes and schedulers that later modules'
    tests start with settings of their own."""
    home = tmp_path_factory.mktemp("worker-node")
    name = f"pipeline-{home.name[-12:]}"
    log = home / "worker.log"
    # The web process and the nodes share the work dir (one volume in docker-compose.yml):
    # deploy reads an experiment's export from there.
    work = home / "work"
    # The suite's nodes fork their tasks from a fork server, as a deployed root node does; a
    # module whose trials should run from warm hosts instead, as a node without one does, sets
    # WORKER_NODE_WARM_PROCESSES (elsewhere the suite starts no warm hosts: pyproject.toml).
    warm = getattr(request.module, "WORKER_NODE_WARM_PROCESSES", None)
    env = {} if warm is None else {"PLATFORM_WARM_TRIAL_PROCESSES": str(warm),
                                   "PLATFORM_TASK_FORK_SERVER": "0"}
    process = live.worker_start(node=name, log=log, PLATFORM_WORK_DIR=str(work), **env)
    with django_db_blocker.unblock():
        live.wait_for(
            lambda: Node.objects.filter(hostname=name).exists(),
            timeout=60,
            what="node registration",
            log=log,
        )
        node = Node.objects.get(hostname=name)
        devices = list(Device.objects.filter(node=node))
    # Registered is not started: the node still reads the database (what it held before a
    # restart) before it consumes, and a test's flush meanwhile empties the content types
    # under it. Celery's "ready." comes after all of that.
    live.wait_for(lambda: " ready." in log.read_text(errors="replace"), timeout=60,
                  what="the node to consume", log=log)
    yield {"name": name, "log": log, "work": work, "process": process, "node": node,
           "devices": devices}
    live.stop(process)


@pytest.fixture
def worker_node(
    worker_node_process: dict[str, Any], transactional_db: None, settings: Any,
    platform_settings_override: PlatformSettingsOverride
) -> Iterator[tuple[str, Path]]:
    name, log, work = (worker_node_process[key] for key in ("name", "log", "work"))
    assert worker_node_process["process"].poll() is None, log.read_text()[-3000:]
    if not Node.objects.filter(hostname=name).exists():
        # The previous test's flush took the rows the node registered when it started; put
        # them back as it wrote them (same ids, so its devices are the ones it knows), fresh.
        Node.objects.bulk_create([worker_node_process["node"]])
        Device.objects.bulk_create(worker_node_process["devices"])
        Node.objects.filter(hostname=name).update(last_heartbeat=Now())
    platform_settings_override(work_dir=work)
    yield name, log
    # The next test starts on an idle node: no task of this test's trials still running (a
    # canceled or preempted one may still be stopping) to write into the next test's database.
    live.wait_for(lambda: not live.work_dir_pids(work), timeout=60,
                  what="this test's trial tasks to end", log=log)


@pytest.fixture(scope="session")
def model_server_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One server per session, started as `manage.py serve_models` starts it (its flags, its
    access token in the environment); each test sends it its own complete model list anyway."""
    from django.conf import settings
    from django.test import override_settings

    from tfplatform.modelregistry.management.commands.serve_models import (
        serve_models_argv,
        serve_models_env,
    )

    grpc_port, rest_port = live.free_port(), live.free_port()
    home = tmp_path_factory.mktemp("model-server")
    # Confined to it (Landlock), as the platform starts it: each test's models live below.
    models = home / "models"
    models.mkdir()
    config = models / "models.config"
    config.write_text("model_config_list {\n}\n")
    log = home / "model-server.log"
    rest = f"http://127.0.0.1:{rest_port}"
    with override_settings(PLATFORM=dataclasses.replace(
        settings.PLATFORM,
        tf_serving_rest=rest,
        tf_serving_grpc=f"127.0.0.1:{grpc_port}",
        model_base_path=models,
        tf_serving_front_refresh_seconds=FRONT_REFRESH_SECONDS,
    )):
        argv, env = serve_models_argv(config=config), serve_models_env()
    process = live.start(argv, env={**env, "PYTHONUNBUFFERED": "1"}, log=log)
    headers = {"Authorization": f"Bearer {settings.PLATFORM.tf_serving_access_token}"}
    live.wait_for(
        lambda: _answers(f"{rest}/v1/models/none", headers=headers), timeout=90,
        what="the model server", log=log,
    )
    yield {"rest": rest, "grpc": f"127.0.0.1:{grpc_port}", "log": log, "headers": headers,
           "pid": process.pid, "models": models}
    live.stop(process)
    _client.cache_clear()


@pytest.fixture
def model_loader() -> Iterator[None]:
    """A real Celery worker on the models queue, in a thread of this process (so it sees this
    test's settings: its model base path and model server), as `manage.py model_loader` runs."""
    from celery.contrib.testing.worker import start_worker

    from tfplatform.config.celery import app
    from tfplatform.modelregistry import tasks  # noqa: F401 - registers the task
    from tfplatform.modelregistry.dispatch import MODELS_QUEUE

    with start_worker(app, pool="solo", perform_ping_check=False, queues=[MODELS_QUEUE],
                      shutdown_timeout=30):
        yield


@pytest.fixture
def model_server(
    model_server_process: dict[str, Any], model_loader: None, settings: Any, tmp_path: Path,
    platform_settings_override: PlatformSettingsOverride
) -> dict[str, Any]:
    base = model_server_process["models"] / tmp_path.name
    base.mkdir()
    platform_settings_override(
        model_base_path=base,
        tf_serving_grpc=model_server_process["grpc"],
        tf_serving_rest=model_server_process["rest"],
        tf_serving_front_refresh_seconds=FRONT_REFRESH_SECONDS,
    )
    # This test's tokens and models, not the last test's: as the scheduler loop would push.
    assert serving_access_push()
    return {**model_server_process, "base": base}


def _answers(url: str, headers: dict[str, str]) -> bool:
    try:
        return requests.get(url, timeout=2, headers=headers).status_code == 404
    except requests.RequestException:
        return False


@pytest.fixture
def postgres() -> Iterator[live.Postgres]:
    """A PostgreSQL of the test's own, for tests that stop and start the database."""
    cluster = live.Postgres(port=live.free_port())
    yield cluster
    cluster.remove()
