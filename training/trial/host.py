"""A task host: Python with TensorFlow already imported, waiting for the one task it becomes.

    python -m training.trial.host --channel-fd N    # imports TF, then waits for one order on fd N
    python -m training.trial.host --channel-dir D   # a container's: the order appears in D

The order (supervisor/hosts.py sends it) is one JSON message with the task's events and log files
passed as descriptors: the host points stdout/stderr at the log, takes the task's environment and
working directory, confines itself (`confinement/`) and runs the task. EOF instead of an
order (the pool closed, or the node died) ends it quietly. A host serves one task of one trial,
never more. It runs inside the sandbox, so it lives with the trial code; the pool that keeps such
hosts ready is supervisor/warm.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import confinement
from confinement import Confinement, confine_apply, confined_fork
from training.isolation.runtime import client_dir

ORDER_MAX_BYTES = 4 * 1024 * 1024
ORDER_POLL_SECONDS = 0.02


def _order_from_socket(*, channel_fd: int) -> tuple[dict[str, Any], int, int] | None:
    channel = socket.socket(fileno=channel_fd)
    try:
        message, fds, _, _ = socket.recv_fds(channel, ORDER_MAX_BYTES, 2)
    except OSError:
        message, fds = b"", []
    channel.close()
    if not message or len(fds) != 2:
        return None
    return json.loads(message), fds[0], fds[1]


def _order_from_directory(*, channel_dir: str) -> tuple[dict[str, Any], int, int]:
    """A container's channel (containers.py): its order appears there whole, by rename."""
    order_path = Path(channel_dir) / "order.json"
    while not order_path.exists():
        time.sleep(ORDER_POLL_SECONDS)
    order = json.loads(order_path.read_text())
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW
    return (order, os.open(Path(channel_dir) / "events.jsonl", flags),
            os.open(Path(channel_dir) / "task.log", flags))


def _serve(*, channel_fd: int | None = None, channel_dir: str | None = None) -> int:
    import training.trial.tfenv  # noqa: F401 - the whole point: pay for the import before the order

    received = (_order_from_socket(channel_fd=channel_fd) if channel_fd is not None
                else _order_from_directory(channel_dir=str(channel_dir)))
    if received is None:
        # Nothing ran here, so nothing needs tearing down: skipping the interpreter's teardown
        # of TensorFlow (0.8 s here) shortens every stop of a node, which waits for its pool.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    order, events_fd, log_fd = received
    # The import left threads behind (OpenBLAS' pool, TensorFlow's) that Landlock would not
    # cover: the task runs in a fork, this process' only thread, and this one stays its
    # namespace's pid 1 (outside the task's work dir), forwarding signals and handing back its
    # exit code.
    return task_become(order=order, events_fd=events_fd, log_fd=log_fd,
                       fork_first=bool(order.get("confine")))


def task_become(*, order: dict[str, Any], events_fd: int, log_fd: int, fork_first: bool) -> int:
    """This process becomes the order's task: its log, environment, working directory and
    Landlock rules, then the task itself. `fork_first`: the task runs in a single-threaded fork
    while this process stays behind as the namespace's pid 1 (a fork server's task is already
    single-threaded, and its sandbox's pid 1 is training/trial/holder.py)."""
    sys.stdout.flush()
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    os.close(devnull)
    image_path = os.environ.get("PYTHONPATH", "")
    os.environ.clear()
    os.environ.update(order["env"])
    if image_path and "PYTHONPATH" not in order["env"]:
        os.environ["PYTHONPATH"] = image_path  # an image's own harness, for what the task spawns
    # The import already asked tempfile for a directory; the task's TMPDIR must win (AutoGraph
    # writes the code it generates there).
    tempfile.tempdir = None
    if scratch := order["env"].get("TMPDIR"):
        os.makedirs(scratch, mode=0o700, exist_ok=True)  # a container's /tmp starts empty
    if fork_first:
        # pid 1 of a namespace gets only the signals it handles: the task decides what they mean.
        confined_fork(forwarded=(signal.SIGTERM, signal.SIGINT, signal.SIGHUP), reap_orphans=True)
    os.chdir(order["cwd"])
    if order.get("confine"):
        rules = Confinement.from_dict(order["confine"])
        # An image's own Python lives where its image put it.
        runtime = (sys.base_prefix, sys.prefix, str(Path(__file__).parents[1]),
                   str(Path(confinement.__file__).parent), str(client_dir()))
        confine_apply(confinement=replace(rules, read=rules.read + runtime))
    from training.trial.worker import task_main

    return task_main(spec_json=order["spec"], cluster_json=order["cluster"],
                     task_type=order["task_type"], task_index=int(order["task_index"]),
                     events_fd=events_fd)


def _main() -> None:
    parser = argparse.ArgumentParser(prog="python -m training.trial.host")
    channel = parser.add_mutually_exclusive_group(required=True)
    channel.add_argument("--channel-fd", type=int)
    channel.add_argument("--channel-dir")
    arguments = parser.parse_args()
    code = _serve(channel_fd=arguments.channel_fd, channel_dir=arguments.channel_dir)
    with contextlib.suppress(OSError):  # a full disk under the log: the code still tells
        sys.stdout.flush()
        sys.stderr.flush()
    # TF's gRPC and collective threads can block interpreter shutdown; the outcome is decided.
    os._exit(code)


if __name__ == "__main__":
    _main()
