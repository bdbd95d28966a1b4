"""`manage.py worker` records how its node runs trials, and says so loudly when not isolated."""

import contextlib
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from bench.affinity import process_tree
from tests import live
from tfplatform.cluster.discovery import DeviceInfo, devices_discover
from tfplatform.cluster.models import Node
from tfplatform.cluster.placement import KIND_GPU
from tfplatform.experiments.management.commands import worker
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


def test_a_node_whose_tensorflow_cannot_see_the_gpus_nvml_finds_does_not_join(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NVML (the hardware, stood in for here) finds a GPU; this machine's TensorFlow, asked for
    real in a process of its own, sees none: the node says why and never registers."""
    gpu = DeviceInfo(kind=KIND_GPU, index=0, name="NVIDIA H100 80GB HBM3",
                     memory_bytes=80 * 2**30, compute_capability="9.0", uuid="GPU-0000")
    monkeypatch.setattr(worker, "devices_discover", lambda **_: [gpu, *devices_discover(
        declared_gpu_slots=0, cpu_slots=1)])
    with pytest.raises(CommandError, match="Node gpu-1 does not join: NVML finds 1 GPU on this "
                                           "machine, but its TensorFlow sees 0"):
        call_command("worker", "--node", "gpu-1", "--gpu-slots", "0", "--cpu-slots", "1")
    assert not Node.objects.filter(hostname="gpu-1").exists()


def _command_line(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


def test_a_root_sandbox_node_starts_its_fork_server_before_its_first_trial(
    tmp_path: Path,
) -> None:
    """So the first trial a node runs is forked from a process that imported TensorFlow
    already, as every later one is, instead of waiting for that import."""
    name = f"forks-{tmp_path.name[-10:]}"
    log = tmp_path / "worker.log"
    process = live.worker_start(
        node=name, log=log, PLATFORM_VAR_DIR=str(tmp_path / "var"),
        PLATFORM_TRIAL_RUNTIME="sandbox",
        PLATFORM_TASK_FORK_SERVER_SOCKET="",  # its own, not the test process' shared one
    )
    try:
        live.wait_for(lambda: Node.objects.filter(hostname=name).exists(), timeout=60,
                      what="node registration", log=log)
        live.wait_for(
            lambda: any("training.trial.forkserver" in _command_line(pid)
                        for pid in process_tree([process.pid])),
            timeout=30, what="the node's fork server", log=log,
        )
    finally:
        live.stop(process)
