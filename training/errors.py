"""The exceptions the training package raises across its boundary.

`InvalidInput` is for things the web process can reject up front with a 400 (bad upload, unknown
name, impossible resources). `UserCodeError` is raised inside a trial process when the user's module
or data is at fault, so the supervisor can mark the trial non-retryable.
"""

import errno
import traceback
from collections.abc import Iterator

TRACEBACK_LINES = 12
# errno values, and the text TF puts in its own errors for them (TF maps ENOSPC to
# ResourceExhaustedError, which otherwise means out of memory).
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
NO_SPACE_TEXTS = ("No space left on device", "Disk quota exceeded")


class InvalidInput(ValueError):
    """A request, upload or user module that can never train; the message says what to fix."""


class UserCodeError(RuntimeError):
    """The user's module or data failed inside the trial; retrying cannot help."""


class NodeUnfit(RuntimeError):
    """The node cannot give a trial what it was granted (GPUs its TensorFlow cannot see): the
    operator's to fix, not the user's; retrying on the same node cannot help."""


class EnvironmentBuildFailed(InvalidInput):
    """An environment's venv could not be built on this node; `log_tail` is the build's last
    output (pip's reason), for the trial's error and the staff page."""

    def __init__(self, message: str, *, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


def traceback_tail(exc: BaseException, *, lines: int = TRACEBACK_LINES) -> str:
    """The last lines of a traceback: where it failed and why, without TF's deep internals."""
    text = "".join(traceback.format_exception(exc)).rstrip().splitlines()
    return "\n".join(text[-lines:])


def causes(exc: BaseException, *, limit: int = 10) -> Iterator[BaseException]:
    """The exception and what caused it, nearest first (a cycle is not followed forever)."""
    seen: BaseException | None = exc
    for _ in range(limit):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


def no_space(exc: BaseException) -> bool:
    """The disk (or the quota) under the trial's files is full, anywhere in the cause chain: the
    node's fault, whoever's code was writing."""
    return any(
        (isinstance(seen, OSError) and seen.errno in NO_SPACE_ERRNOS)
        or (type(seen).__module__.startswith("tensorflow")
            and any(text in str(seen) for text in NO_SPACE_TEXTS))
        for seen in causes(exc)
    )
