"""The exceptions the training package raises across its boundary.

`InvalidInput` is for things the web process can reject up front with a 400 (bad upload, unknown
name, impossible resources). `UserCodeError` is raised inside a trial process when the user's module
or data is at fault, so the supervisor can mark the trial non-retryable.
"""

import traceback

TRACEBACK_LINES = 12


class InvalidInput(ValueError):
    """A request, upload or user module that can never train; the message says what to fix."""


class UserCodeError(RuntimeError):
    """The user's module or data failed inside the trial; retrying cannot help."""


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
