"""Fixtures for tests that need live processes: a worker node, the embedded model server."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests import live
from tfplatform.cluster.models import Node
from tfplatform.modelregistry.server import _client


@pytest.fixture
def worker_node(tmp_path: Path, settings: Any) -> Iterator[tuple[str, Path]]:
    name = f"pipeline-{tmp_path.name[-12:]}"
    log = tmp_path / "worker.log"
    # The web process and the nodes share the work dir (one volume in docker-compose.yml):
    # deploy reads an experiment's export from there.
    work = tmp_path / "work"
    settings.PLATFORM = {**settings.PLATFORM, "WORK_DIR": work}
    process = live.worker_start(node=name, log=log, PLATFORM_WORK_DIR=str(work))
    live.wait_for(
        lambda: Node.objects.filter(hostname=name).exists(),
        timeout=60,
        what="node registration",
        log=log,
    )
    yield name, log
    live.stop(process)


@pytest.fixture(scope="module")
def model_server_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One server per module, started as `manage.py serve_models` starts it (its flags, its
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
    with override_settings(PLATFORM={**settings.PLATFORM, "TF_SERVING_REST": rest,
                                     "TF_SERVING_GRPC": f"127.0.0.1:{grpc_port}",
                                     "MODEL_BASE_PATH": models}):
        argv, env = serve_models_argv(config=config), serve_models_env()
    process = live.start(argv, env={**env, "PYTHONUNBUFFERED": "1"}, log=log)
    headers = {"Authorization": f"Bearer {settings.PLATFORM['TF_SERVING_ACCESS_TOKEN']}"}
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
    model_server_process: dict[str, Any], model_loader: None, settings: Any, tmp_path: Path
) -> dict[str, Any]:
    base = model_server_process["models"] / tmp_path.name
    base.mkdir()
    settings.PLATFORM = {
        **settings.PLATFORM,
        "MODEL_BASE_PATH": base,
        "TF_SERVING_GRPC": model_server_process["grpc"],
        "TF_SERVING_REST": model_server_process["rest"],
    }
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
