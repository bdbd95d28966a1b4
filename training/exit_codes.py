"""How a task's process ends, as its supervisor reads it: the contract between trial/worker.py,
which exits with these, and supervisor/outcome.py, which decides retryability from them.
Signals and OOM kills show up as negative codes / 137 from the OS instead.
"""

# sysexits.h codes, so they cannot be confused with Python's own 1 or argparse's 2.
EXIT_OK = 0
EXIT_USER_ERROR = 65  # EX_DATAERR: the user's module or data; never retryable
EXIT_INTERNAL = 70  # EX_SOFTWARE: a platform bug; retrying the same trial will not help
EXIT_NO_SPACE = 74  # EX_IOERR: the node's work disk is full; retryable once space is freed
EXIT_INFRA_ERROR = 75  # EX_TEMPFAIL: lost peer, unavailable device; retryable
EXIT_PREEMPTED = 143  # stopped by SIGTERM after the last checkpoint, like 128 + SIGTERM

NO_SPACE_HINT = (
    "no space left on the node's work disk: the node's fault, not the trial's; the last "
    "complete checkpoint is kept and the trial resumes from it once an operator frees space"
)
