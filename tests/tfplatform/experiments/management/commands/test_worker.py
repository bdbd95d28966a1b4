"""`manage.py worker` records how its node runs trials, and says so loudly when not isolated."""

from pathlib import Path

import pytest

from tests import live
from tfplatform.cluster.models import Node
from tfplatform.experiments.management.commands.worker import Command, celery_worker_argv

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_process_runtime_worker_registers_it_and_warns_trials_are_not_isolated(
    tmp_path: Path,
) -> None:
    name = f"dev-{tmp_path.name[-10:]}"
    log = tmp_path / "worker.log"
    process = live.worker_start(
        node=name,
        log=log,
        # A var dir of its own: its broker folder, so it takes no other test's tasks.
        PLATFORM_VAR_DIR=str(tmp_path / "var"),
        PLATFORM_TRIAL_RUNTIME="process",
        PLATFORM_WARM_TRIAL_PROCESSES="0",
    )
    try:
        live.wait_for(
            lambda: Node.objects.filter(hostname=name).exists(),
            timeout=60,
            what="node registration",
            log=log,
        )
        assert Node.objects.get(hostname=name).trial_runtime == "process"
        live.wait_for(
            lambda: "NOT isolated" in log.read_text(errors="replace"),
            timeout=30,
            what="the warning",
            log=log,
        )
    finally:
        live.stop(process)
    warning = next(line for line in log.read_text().splitlines() if "NOT isolated" in line)
    assert " WARNING " in warning and f"Trials on node {name} are NOT isolated" in warning
    assert "as this worker's user, with its files and network" in warning


@pytest.mark.parametrize(
    ("flags", "queues"),
    [([], "node.n1,platform"), (["--scheduler-queue"], "node.n1,platform"),
     (["--no-scheduler-queue"], "node.n1")],
)
def test_the_scheduler_queue_is_consumed_unless_turned_off(flags: list[str], queues: str) -> None:
    parser = Command().create_parser("manage.py", "worker")
    options = vars(parser.parse_args(["--node", "n1", *flags]))
    argv = celery_worker_argv(
        hostname="n1", node_queue="node.n1", scheduler_queue=options["scheduler_queue"],
        concurrency=2,
    )
    assert f"--queues={queues}" in argv
