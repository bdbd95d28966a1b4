"""pid 1 of a sandbox whose task the node's fork server makes (supervisor/forks.py).

    python -S -P -m training.trial.holder --channel-fd N

bubblewrap builds the sandbox around this small process; the fork server then forks a process
that already imported TensorFlow into the sandbox's namespaces, and that process becomes the
task. This one stays the namespace's pid 1, as a cold host would: a SIGKILL to it ends every
process of the sandbox, SIGTERM, SIGINT and SIGHUP are passed to the task, orphans are reaped,
and it exits with the task's code, which bubblewrap hands to the supervisor.

Its channel (a SOCK_SEQPACKET socket) carries, in order: "ready" out (the sandbox is built, so
it may be joined), then "pid N" in (from the task, its pid in here) and "exit N" in (from the
fork server's child that waits for the task outside). The end of the channel with no "exit"
means the task never started: EXIT_INFRA_ERROR, so the attempt is retried.

Only the standard library, so it starts in milliseconds (`-S`: no site-packages).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket

from training.exit_codes import EXIT_INFRA_ERROR

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
MESSAGE_MAX_BYTES = 64


def _reap(_signum: int, _frame: object) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def hold(*, channel_fd: int) -> int:
    """The task's exit code, once its waiter sends it."""
    channel = socket.socket(fileno=channel_fd)
    task, early = 0, list[int]()

    def forward(signum: int, _frame: object) -> None:
        if task:
            with contextlib.suppress(ProcessLookupError):
                os.kill(task, signum)
        else:
            early.append(signum)

    # pid 1 of a namespace gets only the signals it handles: the task decides what they mean.
    for signum in FORWARDED:
        signal.signal(signum, forward)
    signal.signal(signal.SIGCHLD, _reap)
    channel.send(b"ready")
    while True:
        try:
            message = channel.recv(MESSAGE_MAX_BYTES)
        except OSError:
            message = b""
        kind, _, value = message.partition(b" ")
        if kind == b"pid" and value.isdigit():
            task = int(value)
            for number in early:
                forward(number, None)
            early.clear()
        elif kind == b"exit" and value.isdigit():
            return int(value)
        elif not message:
            return EXIT_INFRA_ERROR


def _main() -> None:
    parser = argparse.ArgumentParser(prog="python -m training.trial.holder")
    parser.add_argument("--channel-fd", type=int, required=True)
    # Leaving pid 1 ends the namespace, and the task's leftovers with it.
    os._exit(hold(channel_fd=parser.parse_args().channel_fd))


if __name__ == "__main__":
    _main()
