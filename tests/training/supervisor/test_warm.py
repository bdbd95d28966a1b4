"""Warm task hosts: a task handed to one trains exactly like a cold one, only sooner."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from training.isolation.runtime_factory import runtime_for
from training.isolation.sandbox import Exposure
from training.spec import Resources, TrialSpec
from training.supervisor.priority import tree_threads
from training.supervisor.supervise import task_base_environment, trial_supervise
from training.supervisor.warm import WarmPool, host_settled_pid, warm_pool, warm_pool_configure

pytestmark = pytest.mark.slow


def _exposure(tmp_path_factory: pytest.TempPathFactory) -> Exposure:
    base = str(tmp_path_factory.getbasetemp())
    return Exposure(write=(base,), read=(base,))


def _new_pool(*, size: int, log_dir: Path, exposure: Exposure, **options: Any) -> WarmPool:
    # Normal priority: on the suite's saturated cores an idle host would wait for every other
    # test (the idle path has a test of its own).
    return WarmPool(size=size, runtime=runtime_for(name="sandbox"), env=task_base_environment(),
                    exposure=exposure, log_dir=log_dir, **{"idle": False, **options})


def _wait_ready(pool: WarmPool, count: int, *, seconds: float = 60) -> list[int]:
    deadline = time.monotonic() + seconds
    while len(pool.ready_pids()) != count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pool.ready_pids()) == count
    return pool.ready_pids()


@pytest.fixture
def pool(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmPool]:
    configured = warm_pool_configure(
        size=1, runtime=runtime_for(name="sandbox"), env=task_base_environment(),
        exposure=_exposure(tmp_path_factory), log_dir=tmp_path / "warm", idle=False,
    )
    assert configured is not None and warm_pool() is configured
    _wait_ready(configured, 1)
    yield configured
    warm_pool_configure(size=0, runtime=configured.runtime, env={}, exposure=Exposure(),
                        log_dir=tmp_path / "warm")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _launched(run: Any) -> list[dict[str, Any]]:
    return [task for p in run.phase("launched") for task in p["tasks"]]


def test_a_task_runs_in_the_warm_host_with_its_own_environment_and_log(
    pool: WarmPool,
    tmp_path: Path,
    run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
    digits_module: str,
) -> None:
    [warm_pid] = pool.ready_pids()
    spec = make_spec(
        work_dir=tmp_path / "trial",
        model=digits_module,
        resources=Resources(gpus_per_worker=2),
        hyperparameters={"epochs": 2},
    )
    run = run_trial(spec=spec)
    assert run.outcome.status == "completed", run.outcome.exit_reason
    assert _launched(run) == [{"task": "worker:0", "host": warm_pid, "warm": True, "forked": False}]
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
    assert pool.ready_pids() == []
    assert _wait_ready(pool, 1) != [warm_pid]


def test_a_warm_host_holds_nothing_of_anyone_until_its_order(
    tmp_path: Path, make_spec: Callable[..., Any], digits_module: str,
) -> None:
    """Its task's folders are mounted into it when it is taken, and only those."""
    other = tmp_path / "work" / "experiment-other"
    other.mkdir(parents=True)
    (other / "checkpoint").write_text("another tenant's")
    pool = _new_pool(size=1, log_dir=tmp_path / "warm",
                     exposure=Exposure(write=(str(tmp_path / "work"),)))
    try:
        assert pool.inject, "the test suite runs as root: warm hosts get their folders injected"
        _wait_ready(pool, 1)
        [host] = pool._ready["node"]
        # Until bwrap pivots, the pid's root is the node's own: look once the sandbox stands.
        root = Path(f"/proc/{host_settled_pid(host, seconds=30)}/root")
        assert not (root / str(tmp_path).lstrip("/")).exists()  # nothing under the test's tmp
        spec = make_spec(work_dir=tmp_path / "work" / "experiment-mine", model=digits_module)
        Path(spec.work_dir).mkdir()
        from training.isolation.runtime import TaskPython
        from training.isolation.sandbox import trial_paths

        write, read = trial_paths(spec=spec)
        assert pool.take(python=TaskPython(), write=write, read=read) is host
        assert (root / spec.work_dir.lstrip("/")).is_dir()
        assert (root / digits_module.lstrip("/")).read_text() == Path(digits_module).read_text()
        assert not (root / str(other).lstrip("/")).exists()
        assert sorted(p.name for p in (root / str(tmp_path / "work").lstrip("/")).iterdir()) == [
            "experiment-mine"]
        host.kill()
    finally:
        pool.close()


def test_a_host_taken_the_moment_it_starts_still_gets_its_folders(
    tmp_path: Path, make_spec: Callable[..., Any], digits_module: str,
) -> None:
    """A host is in the pool from its start, before bwrap has pivoted into its root: a take
    then waits for the sandbox, so the folders land where the task will look for them."""
    from training.isolation.runtime import TaskPython
    from training.isolation.sandbox import trial_paths

    pool = _new_pool(size=1, log_dir=tmp_path / "warm",
                     exposure=Exposure(write=(str(tmp_path / "work"),)))
    try:
        spec = make_spec(work_dir=tmp_path / "work" / "experiment-mine", model=digits_module)
        Path(spec.work_dir).mkdir(parents=True)
        write, read = trial_paths(spec=spec)
        deadline = time.monotonic() + 30
        while not pool._ready["node"] and time.monotonic() < deadline:
            time.sleep(0.001)
        host = pool.take(python=TaskPython(), write=write, read=read)
        assert host is not None
        root = Path(f"/proc/{host.task_pid()}/root")
        assert (root / spec.work_dir.lstrip("/")).is_dir()
        assert (root / digits_module.lstrip("/")).read_text() == Path(digits_module).read_text()
        host.kill()
    finally:
        pool.close()


def test_a_node_that_cannot_mount_into_sandboxes_keeps_no_warm_ones(tmp_path: Path) -> None:
    """Not root: a warm host would have to show every tenant's folders; none is kept, and every
    task gets a host made for it."""
    from training.isolation.runtime import TaskPython

    work = tmp_path / "work"
    work.mkdir()
    pool = _new_pool(size=1, log_dir=tmp_path / "warm", exposure=Exposure(write=(str(work),)),
                     inject=False)
    try:
        time.sleep(1)  # what its spawner would have started by now
        assert pool.size == 0 and pool.ready_pids() == []
        assert pool.take(python=TaskPython(), write=(str(work / "mine"),), read=()) is None
    finally:
        pool.close()


def test_the_replacement_waits_for_the_end_of_the_task(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pool = _new_pool(size=1, log_dir=tmp_path / "warm", exposure=_exposure(tmp_path_factory),
                     refill_delay_seconds=0.0)
    global_pool = warm_pool_configure(size=0, runtime=pool.runtime, env={}, exposure=Exposure(),
                                      log_dir=tmp_path / "none")
    assert global_pool is None
    import training.supervisor.warm as warm

    warm._pool = pool
    try:
        [warm_pid] = _wait_ready(pool, 1)
        spec = TrialSpec(trial_id="pi", model="pi", dataset="", work_dir=str(tmp_path / "pi"),
                         hyperparameters={"pi_samples_per_replica": 2_000_000, "pi_rounds": 20})
        outcomes: list[Any] = []
        runner = threading.Thread(target=lambda: outcomes.append(trial_supervise(
            spec=spec, on_events=lambda events: None, should_cancel=lambda: False)))
        runner.start()
        seen_running = 0
        while _alive(warm_pid):
            assert pool.ready_pids() in ([], [warm_pid]), "a replacement started while it ran"
            seen_running += 1
            time.sleep(0.05)
        runner.join()
        assert seen_running > 5 and outcomes[0].status == "completed", outcomes
        assert _wait_ready(pool, 1) != [warm_pid]
    finally:
        warm._pool = None
        pool.close()


def test_without_a_warm_host_the_task_starts_cold(
    pool: WarmPool,
    tmp_path: Path,
    run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
    digits_module: str,
) -> None:
    [warm_pid] = pool.ready_pids()
    os.kill(warm_pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pool.ready_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    spec = make_spec(
        work_dir=tmp_path / "trial", model=digits_module, hyperparameters={"epochs": 1}
    )
    run = run_trial(spec=spec)
    assert run.outcome.status == "completed", run.outcome.exit_reason
    [launched] = _launched(run)
    assert launched["warm"] is False and launched["host"] != warm_pid


def test_closing_the_pool_ends_its_waiting_hosts(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pool = _new_pool(size=2, log_dir=tmp_path / "warm", exposure=_exposure(tmp_path_factory))
    _wait_ready(pool, 2)
    hosts = [h for hosts in pool._ready.values() for h in hosts]
    pool.close()
    assert all(h.returncode is not None for h in hosts)
    assert pool.ready_pids() == []
    assert not any(_alive(h.pid) for h in hosts)


def test_a_trial_on_a_registered_dataset_starts_cold_its_folders_bound_by_descriptor(
    pool: WarmPool,
    tmp_path: Path,
    run_trial: Callable[..., Any],
    make_spec: Callable[..., Any],
    write_team_dataset: Callable[[Path], Any],
) -> None:
    """A warm host shows the dataset roots by name (and narrows them following links): the
    trial takes a cold host, which binds the folders the mount check opened."""
    root = tmp_path / "root"
    source = write_team_dataset(root)
    spec = make_spec(work_dir=tmp_path / "trial", model="mlp", dataset="team-data",
                     dataset_source=source.to_dict(), dataset_roots=[str(root)],
                     hyperparameters={"epochs": 1, "batch_size": 16})
    run = run_trial(spec=spec)
    assert run.outcome.status == "completed", run.outcome.exit_reason
    [launched] = _launched(run)
    assert launched["warm"] is False and pool.ready_pids() != []


def _policies(pid: int) -> set[int]:
    """The scheduling policies of every thread of the process tree."""
    found = set()
    for tid in tree_threads(pid=pid):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            found.add(os.sched_getscheduler(tid))
    return found


def test_a_warm_host_imports_at_idle_priority_and_its_task_runs_at_normal(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, run_trial: Callable[..., Any],
    make_spec: Callable[..., Any], digits_module: str,
) -> None:
    """A refill's TensorFlow import takes only CPU that no trial wants (SCHED_IDLE, what the
    pool's spawner thread hands down); the host it becomes runs its task at SCHED_OTHER."""
    configured = warm_pool_configure(
        size=1, runtime=runtime_for(name="sandbox"), env=task_base_environment(),
        exposure=_exposure(tmp_path_factory), log_dir=tmp_path / "warm", idle=True,
    )
    assert configured is not None
    try:
        [pid] = _wait_ready(configured, 1)
        # Idle on a saturated machine: its sandbox may take a while to stand.
        assert host_settled_pid(configured._ready["node"][0], seconds=300) is not None
        assert _policies(pid) == {os.SCHED_IDLE}
        seen: list[set[int]] = []

        def on_event(event: Any) -> None:
            if event.payload.get("phase") == "first_step":
                seen.append(_policies(pid))

        spec = make_spec(work_dir=tmp_path / "trial", model=digits_module,
                         hyperparameters={"epochs": 500})
        run = run_trial(spec=spec, on_event=on_event, should_cancel=lambda: bool(seen))
        assert _launched(run) == [{"task": "worker:0", "host": pid, "warm": True,
                                   "forked": False}]
        assert seen == [{os.SCHED_OTHER}], "every thread of the task at normal priority"
    finally:
        warm_pool_configure(size=0, runtime=configured.runtime, env={}, exposure=Exposure(),
                            log_dir=tmp_path / "warm")
