"""Fixtures for platform tests that need a live worker node."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import live
from tfplatform.cluster.models import Node


@pytest.fixture
def worker_node(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    name = f"pipeline-{tmp_path.name[-12:]}"
    log = tmp_path / "worker.log"
    process = live.worker_start(node=name, log=log, PLATFORM_WORK_DIR=str(tmp_path / "work"))
    live.wait_for(
        lambda: Node.objects.filter(hostname=name).exists(),
        timeout=60,
        what="node registration",
        log=log,
    )
    yield name, log
    live.stop(process)
