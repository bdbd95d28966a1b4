"""Runs one trial as a gang of OS processes and turns what they do into one `TrialOutcome`.

    trial_supervise(spec=..., on_events=..., should_cancel=...) -> TrialOutcome

Each attempt gets `<work_dir>/attempts/<n>/` holding the spec, the cluster layout, one events file
and one log (stdout+stderr) per task. Tasks are `python -m training.worker` processes, or warm
ones from `training.warm` already past the TensorFlow import, each in its own session (so a kill
reaches anything user code spawned), with TF_CONFIG, CUDA_VISIBLE_DEVICES from the allocation,
TF_USE_LEGACY_KERAS=1 and the repo root on PYTHONPATH.

Gang semantics: the trial completes when every essential task (all workers; the chief under
parameter servers) exits 0; the first task to fail stops all others (SIGTERM, then SIGKILL after
`grace_seconds`), because synchronous training cannot continue without it. Cancel does the same.
A multi-node scheduler can pass the whole `cluster` and this node's `local_host`; only local tasks
are started here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from training import catalog
from training.cluster import LOCALHOST, ClusterPlan, TaskAddress, cluster_plan, gpu_ids_for
from training.errors import InvalidInput
from training.events import EventTail
from training.outcome import OutcomeBuilder, exit_describe
from training.signals import SUPERVISOR_PID_ENV
from training.spec import TrialEvent, TrialOutcome, TrialSpec
from training.warm import warm_pool
from training.worker import EXIT_OK, EXIT_USER_ERROR

REPO_ROOT = Path(__file__).resolve().parents[1]
LOG_TAIL_LINES = 15


@dataclass
class _Task:
    address: TaskAddress
    process: subprocess.Popen[bytes]
    events: EventTail
    log_path: Path
    log: IO[bytes] | None  # None when a warm process opened the log itself
    exit_code: int | None = None
    exited_at: float = field(default=0.0)


def _attempt_dir(*, work_dir: str) -> Path:
    root = Path(work_dir) / "attempts"
    root.mkdir(parents=True, exist_ok=True)
    while True:
        numbers = [int(p.name) for p in root.iterdir() if p.name.isdigit()]
        path = root / f"{max(numbers, default=0) + 1:03d}"
        try:
            path.mkdir()
        except FileExistsError:
            continue  # the other nodes of a gang share work_dir and start at the same moment
        return path


def task_base_environment() -> dict[str, str]:
    """What every task process of this node starts with (warm processes too)."""
    env = dict(os.environ)
    env["TF_USE_LEGACY_KERAS"] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    env[SUPERVISOR_PID_ENV] = str(os.getpid())
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.pop("TF_CONFIG", None)
    return env


def _environment(*, spec: TrialSpec, plan: ClusterPlan, task: TaskAddress) -> dict[str, str]:
    env = task_base_environment()
    # Empty hides every GPU: a CPU task must not grab GPU memory another trial was granted.
    gpus = gpu_ids_for(resources=spec.resources, task=task)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    tf_config = plan.tf_config(task=task)
    if tf_config:
        env["TF_CONFIG"] = tf_config
    return env


def _launch(*, spec: TrialSpec, plan: ClusterPlan, task: TaskAddress, attempt: Path) -> _Task:
    stem = f"{task.type}-{task.index}"
    events_path, log_path = attempt / f"{stem}.events.jsonl", attempt / f"{stem}.log"
    argv = [
        "--spec", str(attempt / "spec.json"), "--cluster", str(attempt / "cluster.json"),
        "--task-type", task.type, "--task-index", str(task.index), "--events", str(events_path),
    ]
    env = _environment(spec=spec, plan=plan, task=task)
    pool = warm_pool()
    warm = pool.take(argv=argv, env=env, cwd=attempt, log=log_path) if pool else None
    if warm is not None:
        return _Task(task, warm, EventTail(path=str(events_path)), log_path, None)
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "training.worker", *argv], cwd=attempt, env=env,
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    return _Task(task, process, EventTail(path=str(events_path)), log_path, log)


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])


class _Gang:
    def __init__(self, *, tasks: list[_Task], on_events: Callable[[list[TrialEvent]], None],
                 builder: OutcomeBuilder, trial_id: str) -> None:
        self.tasks, self.on_events, self.builder = tasks, on_events, builder
        self.trial_id = trial_id

    def _event(self, kind: str, **payload: object) -> TrialEvent:
        return TrialEvent(kind=kind, payload=dict(payload), task="supervisor",
                          trial_id=self.trial_id)

    def notice(self, kind: str, **payload: object) -> None:
        self.on_events([self._event(kind, **payload)])

    def pump(self) -> None:
        """Forwards new events, then records exits (in that order, so no last words are lost).

        Everything one pump found goes out as one batch: the recorder writes it in one
        transaction (an epoch's metrics and checkpoint arrive together), and every commit costs
        the node cores that the trial trains on.
        """
        found: list[TrialEvent] = []
        for task in self.tasks:
            found += self._read(task)
        for task in self.tasks:
            if task.exit_code is None and task.process.poll() is not None:
                task.exit_code, task.exited_at = task.process.returncode, time.monotonic()
                found += self._read(task)
                found.append(self._event(
                    "log", message=f"{task.address.name} exited with code {task.exit_code}",
                    exit_code=task.exit_code, task=task.address.name,
                ))
        if found:
            self.on_events(found)

    def _read(self, task: _Task) -> list[TrialEvent]:
        events = task.events.read_new()
        for event in events:
            self.builder.feed(event)
        return events

    def running(self) -> list[_Task]:
        return [t for t in self.tasks if t.exit_code is None]

    def stop(self, *, grace_seconds: float) -> tuple[float, list[str]]:
        """SIGTERM everyone still running, SIGKILL what remains after the grace period."""
        start = time.monotonic()
        for task in self.running():
            _signal(task, signal.SIGTERM)
        deadline = start + grace_seconds
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.05)
            self.pump()
        killed = [t.address.name for t in self.running()]
        for task in self.running():
            _signal(task, signal.SIGKILL)
        for task in self.tasks:
            task.process.wait()
        self.pump()
        return time.monotonic() - start, killed

    def close(self) -> None:
        for task in self.tasks:
            if task.log is not None:
                task.log.close()

    def exit_codes(self) -> dict[str, int | None]:
        return {t.address.name: t.exit_code for t in self.tasks}


def _signal(task: _Task, signum: signal.Signals) -> None:
    try:
        if signum == signal.SIGKILL:
            os.killpg(task.process.pid, signum)  # the session: user code's children too
        else:
            task.process.send_signal(signum)
    except ProcessLookupError:
        pass


def _failure_reason(*, gang: _Gang, culprit: _Task) -> tuple[bool, str]:
    # A user error anywhere explains the rest (peers then fail on the broken collective).
    for task in gang.tasks:
        if task.exit_code == EXIT_USER_ERROR:
            culprit = task
            break
    code = culprit.exit_code if culprit.exit_code is not None else -1
    retryable, what = exit_describe(code=code)
    error = gang.builder.errors.get(culprit.address.name)
    detail = (error.get("traceback") or error.get("message", "")) if error else ""
    if error and error.get("message") and error["message"] not in detail:
        detail = f"{error['message']}\n{detail}"
    detail = detail or _log_tail(culprit.log_path)
    reason = f"{culprit.address.name} {what} (exit code {code})"
    return retryable, f"{reason}:\n{detail}" if detail else reason


def trial_supervise(
    *, spec: TrialSpec, on_events: Callable[[list[TrialEvent]], None],
    should_cancel: Callable[[], bool],
    grace_seconds: float = 30.0, cluster: ClusterPlan | None = None,
    local_host: str = LOCALHOST, poll_seconds: float = 0.2, cancel_check_seconds: float = 1.0,
) -> TrialOutcome:
    try:  # the cheap, TF-free checks: a broken module fails before any process starts
        catalog.model_validate(model=spec.model)
        catalog.resources_validate(resources=spec.resources)
        catalog.hyperparameters_resolve(model=spec.model, values=spec.hyperparameters)
    except InvalidInput as error:
        return TrialOutcome(status="failed", retryable=False, exit_reason=f"invalid trial: {error}")
    plan = cluster or cluster_plan(resources=spec.resources, host=local_host)
    attempt = _attempt_dir(work_dir=spec.work_dir)
    (attempt / "spec.json").write_text(spec.to_json())
    (attempt / "cluster.json").write_text(plan.to_json())
    builder = OutcomeBuilder(chief=plan.chief.name)
    local = plan.local(host=local_host)
    gang = _Gang(tasks=[], on_events=on_events, builder=builder, trial_id=spec.trial_id)
    try:
        gang.notice("status", phase="launching", attempt=attempt.name,
                    tasks=[{"task": t.name, "address": t.address} for t in local])
        for address in local:
            gang.tasks.append(_launch(spec=spec, plan=plan, task=address, attempt=attempt))
        return _watch(gang=gang, plan=plan, should_cancel=_asked_at_most_every(
                          seconds=cancel_check_seconds, check=should_cancel),
                      grace_seconds=grace_seconds, poll_seconds=poll_seconds, attempt=attempt)
    finally:
        if gang.running():  # on_events or should_cancel raised: never leave orphans behind
            gang.stop(grace_seconds=grace_seconds)
        gang.close()


def _asked_at_most_every(*, seconds: float, check: Callable[[], bool]) -> Callable[[], bool]:
    """`check` answered at most once per `seconds`; False in between.

    Asking is a database query in the worker, which shares the cores with training; events and
    exits are still watched every poll.
    """
    last = [float("-inf")]

    def ask() -> bool:
        now = time.monotonic()
        if now - last[0] < seconds:
            return False
        last[0] = now
        return check()

    return ask


def _watch(*, gang: _Gang, plan: ClusterPlan, should_cancel: Callable[[], bool],
           grace_seconds: float, poll_seconds: float, attempt: Path) -> TrialOutcome:
    essential = {t.name for t in plan.essential}
    while True:
        gang.pump()
        failed = sorted(
            (t for t in gang.tasks if t.exit_code is not None
             and (t.exit_code != EXIT_OK or t.address.name not in essential)),
            key=lambda t: t.exited_at,
        )
        if failed:
            gang.notice("status", phase="stopping", reason=f"{failed[0].address.name} exited")
            gang.stop(grace_seconds=grace_seconds)
            retryable, reason = _failure_reason(gang=gang, culprit=failed[0])
            return gang.builder.build(status="failed", retryable=retryable, exit_reason=reason,
                                      exit_codes=gang.exit_codes(), attempt_dir=str(attempt))
        # A node without essential tasks (say, only parameter servers) is done when they all are.
        watched = [t for t in gang.tasks if t.address.name in essential] or gang.tasks
        if all(t.exit_code == EXIT_OK for t in watched):
            gang.stop(grace_seconds=grace_seconds)  # parameter servers and their workers
            return gang.builder.build(status="completed", retryable=False, exit_reason="completed",
                                      exit_codes=gang.exit_codes(), attempt_dir=str(attempt))
        if should_cancel():
            gang.notice("status", phase="canceling")
            seconds, killed = gang.stop(grace_seconds=grace_seconds)
            how = (f"{', '.join(killed)} killed after the {grace_seconds:g}s grace period"
                   if killed else "all stopped cleanly")
            return gang.builder.build(
                status="canceled", retryable=False,
                exit_reason=f"canceled: {len(gang.tasks)} processes ended in {seconds:.1f}s, {how}",
                exit_codes=gang.exit_codes(), attempt_dir=str(attempt),
            )
        time.sleep(poll_seconds)
