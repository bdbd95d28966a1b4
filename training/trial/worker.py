"""Entry point of one trial task, run as its own OS process by the supervisor:

    python -m training.trial.worker --spec SPEC.json --cluster CLUSTER.json \
        --task-type worker --task-index 0 --events EVENTS.jsonl

Events go to the --events file as JSON lines (see events.py). The exit code tells the supervisor
how the task ended; signals and OOM kills show up as negative codes / 137 from the OS instead.
TensorFlow is imported only after the SIGTERM handler is in place, via training.trial.tfenv.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from training.errors import (
    InvalidInput,
    NodeUnfit,
    UserCodeError,
    causes,
    no_space,
    traceback_tail,
)
from training.events import EventWriter
from training.exit_codes import (
    EXIT_INFRA_ERROR,
    EXIT_INTERNAL,
    EXIT_NO_SPACE,
    EXIT_OK,
    EXIT_PREEMPTED,
    EXIT_USER_ERROR,
    NO_SPACE_HINT,
)
from training.signals import Preempted, StopFlag, orphan_watch
from training.spec import TrialSpec
from training.tf_config import ClusterPlan, cluster_plan

# TF error classes that come from the cluster or the machine rather than from the model.
INFRA_ERRORS = (
    "UnavailableError", "AbortedError", "CancelledError", "DeadlineExceededError",
    "InternalError", "UnknownError",
)
# Out of memory: the allocation is the trial's own, so what does not fit it is the model's,
# batch's or data's size, which a restart on the same allocation only repeats.
OUT_OF_MEMORY_ERRORS = ("MemoryError", "ResourceExhaustedError")
OUT_OF_MEMORY_HINT = (
    "out of memory: the model, batch or data does not fit this allocation's memory; "
    "try a smaller batch_size, model or dataset, or more devices"
)




def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m training.trial.worker")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--cluster", default="")
    parser.add_argument("--task-type", default="worker")
    parser.add_argument("--task-index", type=int, default=0)
    parser.add_argument("--events", default="")
    return parser.parse_args(argv)


def _failure(*, exc: BaseException, spec: TrialSpec) -> tuple[int, str]:
    """(exit code, category) for an exception escaping the trial."""
    if no_space(exc):  # before the rest: TF reports a full disk as ResourceExhaustedError
        return EXIT_NO_SPACE, "disk"
    if isinstance(exc, UserCodeError | InvalidInput) or _out_of_memory(exc):
        return EXIT_USER_ERROR, "user"
    if isinstance(exc, NodeUnfit):
        return EXIT_INTERNAL, "node"
    if type(exc).__name__ in INFRA_ERRORS:
        return EXIT_INFRA_ERROR, "infra"
    # Anything raised from inside the user's file (during fit, say) is theirs to fix.
    if spec.model.endswith(".py") and f'File "{spec.model}"' in traceback_tail(exc):
        return EXIT_USER_ERROR, "user"
    if type(exc).__module__.startswith("tensorflow"):  # e.g. InvalidArgumentError from the model
        return EXIT_USER_ERROR, "user"
    return EXIT_INTERNAL, "internal"


def _out_of_memory(exc: BaseException) -> bool:
    """Also when the user's code raised it and it arrives wrapped (UserCodeError)."""
    return any(isinstance(seen, MemoryError) or type(seen).__name__ in OUT_OF_MEMORY_ERRORS
               for seen in causes(exc))


def failure_message(exc: BaseException) -> str:
    message = str(exc)[:4000]
    if no_space(exc):
        return f"{NO_SPACE_HINT} ({message or type(exc).__name__})"
    return f"{OUT_OF_MEMORY_HINT} ({message or type(exc).__name__})" if _out_of_memory(
        exc) else message


def main(argv: list[str] | None = None) -> int:
    """The command line, for running one task by hand outside any supervisor."""
    args = _arguments(argv)
    spec_json = Path(args.spec).read_text()
    spec = TrialSpec.from_json(spec_json)
    cluster_json = (Path(args.cluster).read_text() if args.cluster
                    else cluster_plan(resources=spec.resources).to_json())
    path = Path(args.events or f"{spec.work_dir}/events/{args.task_type}-{args.task_index}.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    return task_main(spec_json=spec_json, cluster_json=cluster_json, task_type=args.task_type,
                     task_index=args.task_index, events_fd=fd)


def task_main(*, spec_json: str, cluster_json: str, task_type: str, task_index: int,
              events_fd: int) -> int:
    """One task of a trial; events go to `events_fd`, the supervisor's file for this task."""
    flag = StopFlag()
    flag.install()
    orphan_watch()
    spec = TrialSpec.from_json(spec_json)
    cluster = ClusterPlan.from_json(cluster_json)
    task = cluster.task(type=task_type, index=task_index)
    events = EventWriter(fd=events_fd, task=task.name, trial_id=spec.trial_id)
    try:
        events.emit("status", phase="started", pid=os.getpid())
        flag.check()
        from training.trial.run import trial_run  # imports TensorFlow

        trial_run(spec=spec, cluster=cluster, task=task, events=events, flag=flag)
        events.emit("status", phase="finished")
        return EXIT_OK
    except Preempted as exc:
        with contextlib.suppress(OSError):
            events.emit("status", phase="preempted", message=str(exc))
        return EXIT_PREEMPTED
    except (Exception, SystemExit) as exc:  # sys.exit() in a user module is a failure too
        code, category = _failure(exc=exc, spec=spec)
        with contextlib.suppress(OSError):
            print(traceback_tail(exc), file=sys.stderr)
        # On a full disk the events file may take no more; the exit code still tells.
        with contextlib.suppress(OSError):
            events.emit("error", category=category,
                        retryable=code in (EXIT_INFRA_ERROR, EXIT_NO_SPACE),
                        error_type=type(exc).__name__, message=failure_message(exc),
                        traceback=traceback_tail(exc))
        return code
    finally:
        with contextlib.suppress(OSError):
            events.close()


if __name__ == "__main__":
    code = main()
    with contextlib.suppress(OSError):  # a full disk under the log: the code still tells
        sys.stdout.flush()
        sys.stderr.flush()
    # TF's gRPC and collective threads can block interpreter shutdown; the outcome is decided.
    os._exit(code)
