"""Runs one trial as a Spark application and turns what its tasks report into a `TrialOutcome`.

    spark_trial_supervise(spec=..., target=SparkTarget(...), on_events=..., should_cancel=...)

The node's side of the Spark backend, the counterpart of supervisor/supervise.py: an attempt
folder under `run_dir`, then the driver (`python -m training.spark.driver`) as a process of its
own with an environment that holds nothing of the node's settings (in local mode the executors,
and so user code, are its children). The tasks' events and output arrive over the attempt's
channel (channel.py) and go to `on_events` as a worker node's do; each task's output of each
stage attempt is also kept in the attempt folder. Spark retries a failed gang itself
(`SparkTarget.stage_attempts`), each time from the trial's last checkpoint; the outcome is the
driver's last word. Cancel stops the driver, which cancels the job.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from training import catalog
from training.errors import InvalidInput
from training.events import LineTail, event_parse
from training.exit_codes import EXIT_OK
from training.isolation.private_files import private_write_text
from training.isolation.runtime import repo_root
from training.isolation.sandbox import trial_paths
from training.spark.channel import ChannelListener, Received
from training.spark.target import SparkTarget
from training.spec import TrialEvent, TrialOutcome, TrialSpec
from training.supervisor.outcome import OutcomeBuilder, exit_describe
from training.supervisor.supervise import (
    OUTPUT_LINES_MAX,
    attempt_dir_new,
    run_dir_default,
)
from training.tf_config import task_kinds

# The packages a task needs on an executor, shipped with the application (SparkContext.addPyFile).
CODE_PACKAGES = ("training", "confinement")
# The driver's environment: what Spark and Java need, nothing of the node's own settings.
DRIVER_ENV = ("PATH", "JAVA_HOME", "SPARK_HOME", "HADOOP_CONF_DIR", "YARN_CONF_DIR",
              "SPARK_LOCAL_IP", "SPARK_LOCAL_DIRS", "TZ", "LANG", "LC_ALL", "TF_CPP_MIN_LOG_LEVEL")
DRIVER_STOP_SECONDS = 60.0
# How long before a gang that no task of has called in is said to wait for the cluster.
NOTHING_HEARD_SECONDS = 20.0


def code_zip(*, folder: Path) -> Path:
    """training/ and confinement/ as one zip, named by its content (made once per content)."""
    root = repo_root()
    files = sorted(p for package in CODE_PACKAGES for p in (root / package).rglob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    target = folder / f"tfp-code-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, str(path.relative_to(root)))
        partial.replace(target)
    return target


def _driver_environment(*, python: str, home: Path) -> dict[str, str]:
    env = {name: os.environ[name] for name in DRIVER_ENV if name in os.environ}
    env.setdefault("LANG", "C.UTF-8")
    found = importlib.util.find_spec("pyspark")
    if "SPARK_HOME" not in env and found is not None and found.origin:
        # pip's pyspark carries Spark's scripts and jars: local-cluster's workers start there.
        env["SPARK_HOME"] = str(Path(found.origin).parent)
    return env | {"PYTHONPATH": str(repo_root()), "PYSPARK_PYTHON": python,
                  "PYSPARK_DRIVER_PYTHON": python, "HOME": str(home), "PYTHONUNBUFFERED": "1"}


class _Attempt:
    """What arrived from the tasks and the driver, turned into events."""

    def __init__(self, *, spec: TrialSpec, folder: Path, builder: OutcomeBuilder,
                 on_events: Callable[[list[TrialEvent]], None]) -> None:
        self.spec, self.folder, self.builder, self.on_events = spec, folder, builder, on_events
        self.output_lines = 0
        self.exit_codes: dict[str, int | None] = {}
        self.application = ""
        self.attempts: dict[str, int] = {}
        self.culprit: str | None = None  # the task whose failure ended the job
        self.completed = False  # its essential tasks finished before the job did
        self.heard = False  # a task called in, or the wait for one was said
        self.exits_by_attempt: dict[tuple[int, str], int] = {}

    def essential_done(self, *, essential: set[str]) -> bool:
        """Whether every essential task (the chief under parameter servers, else every
        worker) of the latest stage attempt exited 0: parameter servers serve until stopped."""
        latest = len(self.attempts)
        return bool(latest) and all(self.exits_by_attempt.get((latest, task)) == EXIT_OK
                                    for task in essential)

    def failed_for_good(self) -> str | None:
        """The first task that exited with a code no retry helps (the user's error)."""
        for task, code in self.exit_codes.items():
            if code not in (None, EXIT_OK) and not exit_describe(code=code)[0]:
                return task
        return None

    def event(self, kind: str, **payload: object) -> TrialEvent:
        return TrialEvent(kind=kind, payload=dict(payload), task="supervisor",
                          trial_id=self.spec.trial_id)

    def take(self, *, received: list[Received], driver_lines: list[bytes]) -> None:
        found: list[TrialEvent] = []
        for line in driver_lines:
            found += self._driver(line)
        for item in received:
            found += self._task(item)
        if found:
            self.on_events(found)

    def _driver(self, line: bytes) -> list[TrialEvent]:
        try:
            message = json.loads(line)
        except ValueError:
            return []
        if not isinstance(message, dict):
            return []
        if "application" in message:
            self.application = str(message["application"])
            return [self.event("status", phase="spark", application=self.application,
                               master=str(message.get("master", "")))]
        if "waiting" in message:
            return [self.event("status", phase="waiting", reason=str(message["waiting"]))]
        return []

    def _attempt_number(self, attempt: str) -> int:
        """Spark's stage attempts counted from 1 in the order their tasks first called in (a
        task knows only its own attempt's id)."""
        return self.attempts.setdefault(attempt, len(self.attempts) + 1)

    def _task(self, item: Received) -> list[TrialEvent]:
        self.heard = True
        number = self._attempt_number(item.attempt)
        if item.kind == "event":
            event = event_parse(line=item.data.encode(), task=item.task,
                                trial_id=self.spec.trial_id)
            if event is None:
                return []
            self.builder.feed(event)
            return [event]
        if item.kind == "output":
            with open(self.folder / f"{item.task.replace(':', '-')}.{number}.log", "a",
                      encoding="utf-8") as log:
                log.write(item.data + "\n")
            if self.output_lines >= OUTPUT_LINES_MAX:
                return []
            self.output_lines += 1
            return [TrialEvent(kind="log", task=item.task, trial_id=self.spec.trial_id,
                               payload={"message": item.data.rstrip("\r"), "stream": "output"})]
        if item.kind == "exit":
            try:
                code = int(item.data)
            except ValueError:
                return []
            self.exit_codes[item.task] = code
            self.exits_by_attempt[(number, item.task)] = code
            return [self.event("log", message=f"{item.task} exited with code {code} "
                                              f"(Spark stage attempt {number})",
                               exit_code=code, task=item.task)]
        return []


def spark_trial_supervise(
    *, spec: TrialSpec, target: SparkTarget, on_events: Callable[[list[TrialEvent]], None],
    should_cancel: Callable[[], bool], grace_seconds: float = 30.0, run_dir: str = "",
    poll_seconds: float = 0.2, cancel_check_seconds: float = 1.0, python: str = "",
) -> TrialOutcome:
    try:  # the cheap, TF-free checks: a broken module fails before Spark is asked for anything
        catalog.model_validate(model=spec.model)
        catalog.resources_validate(resources=spec.resources)
        catalog.hyperparameters_resolve(model=spec.model, values=spec.hyperparameters)
        trial_paths(spec=spec)
    except InvalidInput as error:
        return TrialOutcome(status="failed", retryable=False, exit_reason=f"invalid trial: {error}")
    python = python or sys.executable
    Path(spec.work_dir).mkdir(parents=True, exist_ok=True)
    run_dir = run_dir or run_dir_default(work_dir=spec.work_dir)
    folder = attempt_dir_new(run_dir=run_dir)
    kinds = task_kinds(resources=spec.resources)
    names = {f"{kind}:{index}" for kind, index in kinds}
    chief = "chief:0" if "chief:0" in names else "worker:0"
    builder = OutcomeBuilder(chief=chief)
    attempt = _Attempt(spec=spec, folder=folder, builder=builder, on_events=on_events)
    key = secrets.token_bytes(32)
    listener = ChannelListener(host=target.channel_host, key=key, trial_id=spec.trial_id,
                               tasks=names)
    order = {
        "target": target.to_dict(), "trial_id": spec.trial_id, "spec": spec.to_json(),
        "kinds": kinds, "channel": f"{target.channel_host}:{listener.port}", "key": key.hex(),
        "code_zip": str(code_zip(folder=Path(run_dir))), "cwd": spec.work_dir,
        "python": target.python, "app_name": f"tfp-trial-{spec.trial_id}-{folder.name}",
    }
    private_write_text(path=folder / "spec.json", text=spec.to_json())
    private_write_text(path=folder / "order.json", text=json.dumps(order))
    result_path = folder / "result.json"
    on_events([attempt.event("status", phase="launching", attempt=folder.name, runtime="spark",
                             isolated=False, master=target.master, cluster=target.name,
                             tasks=[{"task": name} for name in sorted(names)])])
    with open(folder / "driver.out", "wb") as out, open(folder / "driver.log", "wb") as log:
        driver = subprocess.Popen(
            [python, "-m", "training.spark.driver", str(folder / "order.json"), str(result_path)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=log, cwd=folder,
            env=_driver_environment(python=python, home=folder), start_new_session=True)
    lines = LineTail(path=str(folder / "driver.out"))
    essential = _essential(names=names)
    canceled = False
    last_asked = float("-inf")
    launched = time.monotonic()
    try:
        while driver.poll() is None:
            attempt.take(received=listener.drain(), driver_lines=lines.read_lines())
            if not attempt.heard and time.monotonic() - launched >= NOTHING_HEARD_SECONDS:
                # No task has called in: the master unreachable, no executors, no slots. The
                # driver says which where Spark lets it; this says that much at least.
                attempt.heard = True
                on_events([attempt.event(
                    "status", phase="waiting",
                    reason=f"Waiting for the Spark cluster ({target.master}): none of the "
                           f"gang's {len(names)} tasks has started")])
            if attempt.culprit is None and (culprit := attempt.failed_for_good()) is not None:
                # A task failed for a reason a retry repeats (the user's code or data): its
                # peers would wait for it in their collectives. The job ends here, and Spark
                # retries nothing (the task returned its code instead of failing).
                attempt.culprit = culprit
                on_events([attempt.event("status", phase="stopping",
                                         reason=f"{culprit} exited")])
                _driver_stop(driver=driver, grace_seconds=grace_seconds)
                break
            if essential != names and attempt.essential_done(essential=essential):
                # Parameter-server training: the chief finished; its servers and workers serve
                # until stopped, as on a worker node.
                attempt.completed = True
                _driver_stop(driver=driver, grace_seconds=grace_seconds)
                break
            if not canceled and time.monotonic() - last_asked >= cancel_check_seconds:
                last_asked = time.monotonic()
                if should_cancel():
                    canceled = True
                    on_events([attempt.event("status", phase="canceling")])
                    _driver_stop(driver=driver, grace_seconds=grace_seconds)
            time.sleep(poll_seconds)
        time.sleep(poll_seconds)  # the last lines of a task that ended with the driver
        attempt.take(received=listener.drain(), driver_lines=lines.read_lines())
    finally:
        if driver.poll() is None:  # on_events or should_cancel raised: no application left
            _driver_stop(driver=driver, grace_seconds=grace_seconds)
        listener.close()
    return _outcome(attempt=attempt, result_path=result_path, canceled=canceled,
                    essential=essential, driver_log=folder / "driver.log")


def _essential(*, names: set[str]) -> set[str]:
    return {"chief:0"} if "chief:0" in names else names


def _driver_stop(*, driver: subprocess.Popen[bytes], grace_seconds: float) -> None:
    driver.send_signal(signal.SIGTERM)
    try:
        driver.wait(timeout=grace_seconds + DRIVER_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()


def _outcome(*, attempt: _Attempt, result_path: Path, canceled: bool, essential: set[str],
             driver_log: Path) -> TrialOutcome:
    build = attempt.builder.build
    folder = str(attempt.folder)
    try:
        result = json.loads(result_path.read_text())
    except (OSError, ValueError):
        tail = "\n".join(driver_log.read_text(errors="replace").splitlines()[-15:]) \
            if driver_log.exists() else ""
        result = {"status": "failed", "reason": f"the Spark driver ended without a result:\n{tail}"}
    if attempt.culprit is not None:
        return _task_failure(attempt=attempt, culprit=attempt.culprit)
    if attempt.completed:
        return build(status="completed", retryable=False, exit_reason="completed",
                     exit_codes=attempt.exit_codes, attempt_dir=folder)
    if canceled or result.get("status") == "canceled":
        return build(status="canceled", retryable=False,
                     exit_reason="canceled: the Spark job was canceled",
                     exit_codes=attempt.exit_codes, attempt_dir=folder)
    if result.get("status") == "finished":
        codes = {str(r["task"]): int(r["code"]) for r in result.get("results", [])}
        attempt.exit_codes.update(codes)
        failed = sorted(name for name in essential if codes.get(name) != EXIT_OK)
        if not failed:
            return build(status="completed", retryable=False, exit_reason="completed",
                         exit_codes=attempt.exit_codes, attempt_dir=folder)
        return _task_failure(attempt=attempt, culprit=failed[0])
    errors = [e.get("message", "") for e in attempt.builder.errors.values() if e.get("message")]
    reason = str(result.get("reason", "the Spark job failed"))
    said = _spark_errors(driver_log=driver_log)
    if said:  # what Spark logged first: an unreachable master says so only there
        reason = f"{said}\n{reason}"
    if errors:
        reason += f"\nLast task error: {errors[-1]}"
    return build(status="failed", retryable=False,
                 exit_reason=f"Spark gave up on the trial's gang: {reason}",
                 exit_codes=attempt.exit_codes, attempt_dir=folder)


def _task_failure(*, attempt: _Attempt, culprit: str) -> TrialOutcome:
    code = attempt.exit_codes.get(culprit)
    _, what = exit_describe(code=code if code is not None else -1)
    error = attempt.builder.errors.get(culprit, {})
    detail = error.get("traceback") or error.get("message", "")
    reason = f"{culprit} {what} (exit code {code})"
    return attempt.builder.build(status="failed", retryable=False,
                                 exit_reason=f"{reason}:\n{detail}" if detail else reason,
                                 exit_codes=attempt.exit_codes, attempt_dir=str(attempt.folder))


def _spark_errors(*, driver_log: Path, most: int = 3) -> str:
    """The last ERROR lines Spark's own logging wrote, without their timestamps."""
    try:
        lines = driver_log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [line.split(" ERROR ", 1)[1].strip() for line in lines if " ERROR " in line]
    return "; ".join(errors[-most:])[:2000]
