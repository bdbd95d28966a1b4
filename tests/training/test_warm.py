"""Warm trial processes: a task handed to one trains exactly like a cold one, only sooner."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from training.spec import Resources
from training.supervisor import task_base_environment
from training.warm import WarmPool, warm_pool, warm_pool_configure

pytestmark = pytest.mark.slow


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[WarmPool]:
    configured = warm_pool_configure(size=1, env=task_base_environment(), log_dir=tmp_path / "warm")
    assert configured is not None and warm_pool() is configured
    yield configured
    warm_pool_configure(size=0, env={}, log_dir=tmp_path / "warm")


def _waiting_pids(pool: WarmPool) -> list[int]:
    return [p.pid for p in pool._ready if p.poll() is None]


def test_a_task_runs_in_the_warm_process_with_its_own_environment_and_log(
    pool: WarmPool,
    tmp_path: Path,
    run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
    digits_module: str,
) -> None:
    [warm_pid] = _waiting_pids(pool)
    spec = make_spec(
        work_dir=tmp_path / "trial",
        model=digits_module,
        resources=Resources(gpus_per_worker=2),
        hyperparameters={"epochs": 2},
    )
    run = run_trial(spec=spec)
    assert run.outcome.status == "completed", run.outcome.exit_reason
    assert [p["pid"] for p in run.phase("started")] == [warm_pid]
    # The device layout was made after the hand-off, from this task's allocation.
    assert run.outcome.strategy == "MirroredStrategy" and run.outcome.replicas == 2
    assert len(run.phase("first_step")) == 1
    first_step = next(e for e in run.events if e.payload.get("phase") == "first_step")
    first_metric = next(e for e in run.events if e.kind == "metric")
    assert first_step.time <= first_metric.time
    log = Path(run.outcome.attempt_dir) / "worker-0.log"
    assert log.exists()
    # The replacement starts only after the task has ended (and a short delay), so its import
    # never took CPU from the trial it served; then the node is warm again.
    assert _waiting_pids(pool) == []
    deadline = time.monotonic() + 30
    while not _waiting_pids(pool) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_waiting_pids(pool)) == 1 and _waiting_pids(pool) != [warm_pid]


def test_the_replacement_waits_for_the_end_of_the_task(tmp_path: Path) -> None:
    from training.spec import TrialSpec

    pool = WarmPool(size=1, env=task_base_environment(), log_dir=tmp_path / "warm",
                    refill_delay_seconds=0.0)
    try:
        spec = TrialSpec(trial_id="pi", model="pi", dataset="", work_dir=str(tmp_path / "pi"),
                         hyperparameters={"pi_samples_per_replica": 2_000_000, "pi_rounds": 20})
        (tmp_path / "spec.json").write_text(spec.to_json())
        taken = pool.take(
            argv=["--spec", str(tmp_path / "spec.json"), "--events", str(tmp_path / "ev.jsonl")],
            env=task_base_environment(), cwd=tmp_path, log=tmp_path / "task.log",
        )
        assert taken is not None
        seen_running = 0
        while taken.poll() is None:
            assert _waiting_pids(pool) == [], "a replacement started while the task ran"
            seen_running += 1
            time.sleep(0.05)
        assert seen_running > 5 and taken.returncode == 0, (tmp_path / "task.log").read_text()
        deadline = time.monotonic() + 30
        while not _waiting_pids(pool) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_waiting_pids(pool)) == 1
    finally:
        pool.close()


def test_without_a_warm_process_the_task_starts_cold(
    pool: WarmPool,
    tmp_path: Path,
    run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
    digits_module: str,
) -> None:
    [warm_pid] = _waiting_pids(pool)
    os.kill(warm_pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _waiting_pids(pool) and time.monotonic() < deadline:
        time.sleep(0.05)
    spec = make_spec(
        work_dir=tmp_path / "trial", model=digits_module, hyperparameters={"epochs": 1}
    )
    run = run_trial(spec=spec)
    assert run.outcome.status == "completed", run.outcome.exit_reason
    assert [p["pid"] for p in run.phase("started")] != [warm_pid]


def test_closing_the_pool_ends_its_waiting_processes(tmp_path: Path) -> None:
    pool = WarmPool(size=2, env=task_base_environment(), log_dir=tmp_path / "warm")
    processes = list(pool._ready)
    assert len(processes) == 2
    pool.close()
    assert [p.returncode for p in processes] == [0, 0]
    assert pool.take(argv=[], env={}, cwd=tmp_path, log=tmp_path / "x.log") is None
