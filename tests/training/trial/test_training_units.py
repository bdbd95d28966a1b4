"""TF-free rules: strategy choice, batch/LR scaling, cluster layout, exit classification, events."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import pytest

from training.errors import InvalidInput, NodeUnfit
from training.events import EventTail, EventWriter
from training.exit_codes import EXIT_INFRA_ERROR, EXIT_PREEMPTED, EXIT_USER_ERROR
from training.scaling import batch_plan, learning_rate_at
from training.spec import Resources, TrialEvent, TrialOutcome, TrialSpec
from training.supervisor.outcome import exit_describe
from training.tf_config import TaskAddress, cluster_plan, gpu_ids_for, slots_for
from training.trial.strategy import gpus_visible_check, strategy_plan


@pytest.mark.parametrize(
    ("workers", "gpus", "ps", "physical", "name", "reason_part", "devices", "emulated"),
    [
        (1, 0, 0, 0, "default", "no GPU on 1 worker → default strategy (CPU)", 0, False),
        (1, 1, 0, 1, "OneDeviceStrategy", "1 GPU on one node → OneDeviceStrategy", 1, False),
        (1, 1, 0, 0, "OneDeviceStrategy", "emulated as 1 logical CPU device", 1, True),
        (1, 2, 0, 2, "MirroredStrategy", "2 GPUs on one node → MirroredStrategy", 2, False),
        (1, 4, 0, 0, "MirroredStrategy", "emulated as 4 logical CPU devices", 4, True),
        (1, 4, 0, 2, "MirroredStrategy", "only 2 GPUs visible", 2, False),
        (2, 0, 0, 0, "MultiWorkerMirroredStrategy", "2 workers → MultiWorker", 0, False),
        (3, 2, 0, 2, "MultiWorkerMirroredStrategy", "3 workers × 2 GPUs", 2, False),
        (2, 2, 0, 0, "MultiWorkerMirroredStrategy", "one CPU replica per worker", 0, False),
        (2, 0, 1, 0, "ParameterServerStrategy", "1 parameter server and 2 workers", 0, False),
        (1, 0, 2, 0, "ParameterServerStrategy", "2 parameter servers and 1 worker", 0, False),
    ],
)
def test_strategy_choice_table(
    workers: int,
    gpus: int,
    ps: int,
    physical: int,
    name: str,
    reason_part: str,
    devices: int,
    emulated: bool,
) -> None:
    plan = strategy_plan(
        resources=Resources(workers=workers, gpus_per_worker=gpus, parameter_servers=ps),
        physical_gpus=physical,
    )
    assert plan.name == name
    assert reason_part in plan.reason
    assert (plan.devices_per_worker, plan.emulated, plan.workers) == (devices, emulated, workers)


@pytest.mark.parametrize(("physical", "held", "visible", "fails"), [
    (True, 2, 0, True),   # TensorFlow without CUDA on a GPU node
    (True, 2, 1, True),   # part of what it holds
    (True, 2, 2, False),
    (False, 2, 0, False),  # emulated slots: logical CPU devices stand in
])
def test_a_task_must_see_the_real_gpus_it_holds(physical: bool, held: int, visible: int,
                                                 fails: bool) -> None:
    resources = Resources(gpus_per_worker=held, gpus_physical=physical)
    if fails:
        with pytest.raises(NodeUnfit, match=f"holds {held} GPUs of its node, but its "
                                            f"TensorFlow sees {visible}"):
            gpus_visible_check(resources=resources, held=held, visible=visible)
    else:
        gpus_visible_check(resources=resources, held=held, visible=visible)


def test_batch_and_learning_rate_scale_linearly_with_replicas() -> None:
    plan = batch_plan(batch_size=32, replicas=4, learning_rate=0.01, scale=True, warmup_epochs=2)
    assert (plan.per_replica_batch_size, plan.global_batch_size) == (32, 128)
    assert plan.learning_rate == pytest.approx(0.04)
    assert "32 × 4 replicas = global batch 128" in plan.rule
    assert "warm-up from 0.01 over 2 epochs" in plan.rule
    # Warm-up ramps linearly from the single-replica rate to the scaled one, then holds.
    assert learning_rate_at(plan=plan, step=0, steps_per_epoch=10) == pytest.approx(0.01)
    assert learning_rate_at(plan=plan, step=10, steps_per_epoch=10) == pytest.approx(0.025)
    assert learning_rate_at(plan=plan, step=20, steps_per_epoch=10) == pytest.approx(0.04)
    assert learning_rate_at(plan=plan, step=500, steps_per_epoch=10) == pytest.approx(0.04)


def test_batch_scaling_off_splits_the_global_batch_and_keeps_the_rate() -> None:
    plan = batch_plan(batch_size=64, replicas=4, learning_rate=0.01, scale=False, warmup_epochs=3)
    assert (plan.per_replica_batch_size, plan.global_batch_size) == (16, 64)
    assert plan.learning_rate == 0.01
    assert "unscaled" in plan.rule and "warm-up" not in plan.rule
    one = batch_plan(batch_size=32, replicas=1, learning_rate=0.1, scale=True, warmup_epochs=2)
    assert (one.global_batch_size, one.learning_rate) == (32, 0.1)
    with pytest.raises(InvalidInput, match="smaller than the 4 replicas"):
        batch_plan(batch_size=2, replicas=4, learning_rate=0.1, scale=False, warmup_epochs=0)


@pytest.mark.parametrize("scale", [True, False], ids=["scaled", "unscaled"])
@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_an_elastic_trial_below_its_target_keeps_the_target_s_batch_and_rate(
    scale: bool, replicas: int
) -> None:
    full = batch_plan(batch_size=32, replicas=4, learning_rate=0.01, scale=scale,
                      warmup_epochs=2)
    plan = batch_plan(batch_size=32, replicas=replicas, learning_rate=0.01, scale=scale,
                      warmup_epochs=2, replicas_target=4)
    assert (plan.replicas, plan.replicas_target, plan.accumulation_steps) == (
        replicas, 4, 4 // replicas)
    assert (plan.global_batch_size, plan.per_replica_batch_size) == (
        full.global_batch_size, full.per_replica_batch_size)
    assert (plan.learning_rate, plan.base_learning_rate) == (
        full.learning_rate, full.base_learning_rate)
    # The same warm-up at every size, step for step.
    assert [learning_rate_at(plan=plan, step=s, steps_per_epoch=10) for s in (0, 7, 20)] == [
        learning_rate_at(plan=full, step=s, steps_per_epoch=10) for s in (0, 7, 20)]
    assert plan.as_dict()["accumulation_steps"] == 4 // replicas
    if replicas == 2 and scale:
        assert plan.rule.startswith("per-replica batch 32 × 2 replicas × 2 accumulation steps "
                                    "= global batch 128; learning rate 0.01 × 4 = 0.04")


def test_a_plan_without_a_target_follows_the_replicas_granted() -> None:
    plan = batch_plan(batch_size=32, replicas=2, learning_rate=0.01, scale=True, warmup_epochs=0)
    assert (plan.replicas_target, plan.accumulation_steps, plan.global_batch_size) == (2, 1, 64)
    assert "accumulation" not in plan.rule


@pytest.mark.parametrize(("replicas", "target", "batch_size", "scale", "message"), [
    (3, 4, 32, True, "3 replicas cannot keep the global batch of 4"),
    (4, 2, 32, True, "more than the 2 the experiment's global batch is defined for"),
    (2, 4, 30, False, "batch_size 30 does not split evenly over the 4 replicas"),
    (2, 4, 2, False, "smaller than the 4 replicas"),
])
def test_a_size_that_cannot_keep_the_target_s_batch_is_refused(
    replicas: int, target: int, batch_size: int, scale: bool, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        batch_plan(batch_size=batch_size, replicas=replicas, learning_rate=0.01, scale=scale,
                   warmup_epochs=0, replicas_target=target)


def test_resources_carry_the_replicas_target() -> None:
    assert Resources.from_dict({"gpus_per_worker": 2, "replicas_target": 4}).replicas_target == 4
    assert Resources.from_dict({}).replicas_target == 0


def test_cluster_for_multi_worker_has_distinct_free_ports_and_tf_config() -> None:
    plan = cluster_plan(resources=Resources(workers=3))
    assert [t.name for t in plan.tasks] == ["worker:0", "worker:1", "worker:2"]
    assert len({t.port for t in plan.tasks}) == 3 and all(t.port > 0 for t in plan.tasks)
    assert plan.chief.name == "worker:0" and len(plan.essential) == 3
    config = json.loads(plan.tf_config(task=plan.tasks[2]))
    assert config["task"] == {"type": "worker", "index": 2}
    assert config["cluster"]["worker"] == [t.address for t in plan.tasks]


def test_cluster_with_parameter_servers_has_chief_workers_and_ps() -> None:
    resources = Resources(workers=2, parameter_servers=1, gpus_per_worker=2, gpu_ids=(4, 5, 6, 7))
    plan = cluster_plan(resources=resources)
    assert sorted(plan.cluster_dict()) == ["chief", "ps", "worker"]
    assert plan.chief.name == "chief:0" and [t.name for t in plan.essential] == ["chief:0"]
    assert gpu_ids_for(resources=resources, task=plan.task(type="worker", index=1)) == (6, 7)
    assert gpu_ids_for(resources=resources, task=plan.task(type="ps", index=0)) == ()
    assert gpu_ids_for(resources=resources, task=plan.chief) == ()


def test_a_task_holds_its_gpus_or_its_cpu_slots() -> None:
    """What sizes its container: GPUs, else the CPU slots a GPU-less worker was granted."""
    gang = Resources(workers=2, parameter_servers=1, gpus_per_worker=2, gpu_ids=(4, 5, 6, 7))
    plan = cluster_plan(resources=gang)
    assert slots_for(resources=gang, task=plan.task(type="worker", index=1)) == 2
    assert slots_for(resources=gang, task=plan.task(type="ps", index=0)) == 1
    assert slots_for(resources=gang, task=plan.chief) == 1
    wide = Resources(cpu_slots_per_worker=3)
    assert slots_for(resources=wide, task=cluster_plan(resources=wide).tasks[0]) == 3
    assert slots_for(resources=Resources(), task=cluster_plan(resources=Resources()).tasks[0]) == 1
    # Through the spec file the supervisor reads; an older spec without the field holds one.
    spec = TrialSpec(trial_id="1", model="workspace", dataset="", work_dir="/w", resources=wide)
    assert TrialSpec.from_json(spec.to_json()).resources.cpu_slots_per_worker == 3
    assert Resources.from_dict({"workers": 1}).cpu_slots_per_worker == 1


def test_single_worker_has_no_tf_config_and_multi_node_plans_split_by_host() -> None:
    single = cluster_plan(resources=Resources())
    assert single.tf_config(task=single.tasks[0]) == ""
    two_nodes = type(single)(
        (TaskAddress("worker", 0, "10.0.0.1", 2222), TaskAddress("worker", 1, "10.0.0.2", 2222))
    )
    assert [t.name for t in two_nodes.local(host="10.0.0.2")] == ["worker:1"]
    assert type(single).from_json(two_nodes.to_json()) == two_nodes


@pytest.mark.parametrize(
    ("code", "retryable", "text"),
    [
        (EXIT_USER_ERROR, False, "user code"),
        (EXIT_INFRA_ERROR, True, "infrastructure"),
        (-signal.SIGKILL, True, "SIGKILL (out of memory"),
        (137, True, "SIGKILL"),
        (-signal.SIGSEGV, True, "SIGSEGV"),
        (EXIT_PREEMPTED, True, "SIGTERM"),
        (1, False, "code 1"),
    ],
)
def test_exit_codes_map_to_retryability(code: int, retryable: bool, text: str) -> None:
    assert exit_describe(code=code)[0] is retryable
    assert text in exit_describe(code=code)[1]


def test_event_tail_yields_only_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(fd=os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), task="worker:0",
                         trial_id="t")
    tail = EventTail(path=str(path))
    writer.emit("metric", epoch=1, loss=0.5)
    with path.open("a") as handle:  # a task killed mid-write leaves half a line
        handle.write('{"kind": "metric", "payl')
    assert [e.payload for e in tail.read_new()] == [{"epoch": 1, "loss": 0.5}]
    with path.open("a") as handle:
        handle.write('oad": {"epoch": 2}, "task": "worker:0", "time": 1.0, "trial_id": "t"}\n')
    assert [e.payload["epoch"] for e in tail.read_new()] == [2]
    assert tail.read_new() == []


def test_records_round_trip_through_json() -> None:
    spec = TrialSpec(
        trial_id="t",
        model="mlp",
        dataset="digits",
        work_dir="/w",
        hyperparameters={"epochs": 2},
        target_value=0.9,
        resources=Resources(workers=2, gpus_per_worker=1, gpu_ids=(0, 1)),
    )
    assert TrialSpec.from_json(spec.to_json()) == spec
    event = TrialEvent(kind="metric", payload={"epoch": 1}, task="worker:0", trial_id="t")
    assert TrialEvent.from_json(event.to_json()) == event
    outcome = TrialOutcome(
        status="completed",
        retryable=False,
        exit_reason="completed",
        final_metrics={"val_accuracy": 0.9},
        time_to_target_seconds=math.pi,
    )
    assert TrialOutcome.from_json(outcome.to_json()) == outcome


def test_trial_task_stops_when_its_supervisor_dies(tmp_path: Path) -> None:
    """A task whose supervisor is SIGKILLed must not keep running unaccounted for."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "import os\n"
        "os.environ['PLATFORM_SUPERVISOR_PID'] = str(os.getpid())\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'from training.signals import orphan_watch, StopFlag\\n"
        "import time\\nflag = StopFlag(); flag.install(); orphan_watch(interval_seconds=0.2)\\n"
        "while not flag.requested: time.sleep(0.05)\\n'], start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    root = Path(__file__).resolve().parents[3]
    parent = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{child}/stat")
        # Gone, or a zombie: this sandbox's init may be slow to reap adopted children.
        if not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the orphaned task kept running")


def test_attempt_dirs_are_distinct_when_gang_parts_start_together(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from training.supervisor.supervise import attempt_dir_new

    with ThreadPoolExecutor(max_workers=8) as pool:
        paths = list(pool.map(lambda _: attempt_dir_new(run_dir=str(tmp_path)), range(40)))
    assert len(set(paths)) == 40


def test_cancel_is_asked_at_most_once_per_interval() -> None:
    from training.supervisor.supervise import _asked_at_most_every

    asked: list[int] = []

    def check() -> bool:
        asked.append(1)
        return True

    ask = _asked_at_most_every(seconds=60.0, check=check)
    assert ask() is True  # the first poll asks at once
    assert [ask() for _ in range(5)] == [False] * 5
    assert len(asked) == 1
    every_time = _asked_at_most_every(seconds=0.0, check=check)
    assert every_time() and every_time()
    assert len(asked) == 3
