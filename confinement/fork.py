"""Fork before confining: Landlock binds only the calling thread, and an import (TensorFlow,
OpenBLAS, gRPC) leaves threads behind that it would not cover."""

from __future__ import annotations

import contextlib
import os
import signal

FORWARDED = (signal.SIGTERM, signal.SIGINT)


def confined_fork(*, forwarded: tuple[signal.Signals, ...] = FORWARDED,
                  reap_orphans: bool = False) -> None:
    """Returns in a child, single-threaded; the parent stays behind, forwarding `forwarded`
    signals to it, and exits as the child did, never returning. `reap_orphans`: for a
    namespace's pid 1, to which the child's orphans are reparented."""
    # The handlers are set before the fork: a signal that came between the fork and setting
    # them would end the parent (whichever of its threads took it), the child left running.
    # One that comes before the child exists is kept and sent once it does.
    child, early = 0, []

    def forward(number: int, _frame: object) -> None:
        if child:
            _forward(child, number)
        else:
            early.append(number)

    # pid 1 of a namespace gets only the signals it handles; the child decides what they mean.
    previous = {signum: signal.signal(signum, forward) for signum in forwarded}
    child = os.fork()
    if child == 0:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        return
    for number in early:
        _forward(child, number)
    while True:
        try:
            pid, status = os.wait() if reap_orphans else os.waitpid(child, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == child:
            os._exit(exit_code(status=status))


def exit_code(*, status: int) -> int:
    """A wait status as a shell reports it: the code, or 128 + the signal that ended it."""
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _forward(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
