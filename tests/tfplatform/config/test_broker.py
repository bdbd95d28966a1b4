"""The embedded broker (`make run`'s filesystem transport): Celery workers that start together
bind the same exchange at the same moment, and each of them lives to consume."""

import json
import multiprocessing
import time
from pathlib import Path

import pytest
from kombu import Connection, Exchange, Queue
from kombu.transport.virtual import BrokerState

from tfplatform.config.broker import FilesystemTransport

PROCESSES = 12


def _bind(*, folder: str, index: int, start_at: float) -> None:
    # A worker starts with no exchange declared in memory; a fork would inherit this test
    # process' (a live test's Celery control declares celery.pidbox with other arguments,
    # which the transport then refuses to see declared again: NotEquivalentError).
    FilesystemTransport.global_state = BrokerState()
    options = {"data_folder_in": folder, "data_folder_out": folder,
               "control_folder": f"{folder}/control"}
    with Connection(transport=FilesystemTransport, transport_options=options) as connection:
        channel = connection.channel()
        time.sleep(max(0.0, start_at - time.time()))  # all of them at once
        Queue(f"worker-{index}.celery.pidbox", Exchange("celery.pidbox", type="fanout"),
              channel=channel).declare()


@pytest.mark.parametrize("attempt", range(3))
def test_workers_binding_one_exchange_together_all_start_and_all_are_bound(
    tmp_path: Path, attempt: int
) -> None:
    context = multiprocessing.get_context("fork")
    start_at = time.time() + 0.5
    processes = [context.Process(target=_bind, kwargs={"folder": str(tmp_path), "index": i,
                                                       "start_at": start_at})
                 for i in range(PROCESSES)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
    assert [p.exitcode for p in processes] == [0] * PROCESSES
    table = json.loads((tmp_path / "control" / "celery.pidbox.exchange").read_text())
    assert sorted(queue for _, _, queue in table) == sorted(
        f"worker-{i}.celery.pidbox" for i in range(PROCESSES))
    assert not [p.name for p in (tmp_path / "control").iterdir() if p.name.startswith(".")]
