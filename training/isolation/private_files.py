"""Files that hold a secret (a task's spec with its workspace's API and Jupyter tokens, a
container's order, a TensorBoard record): 0600 from the moment they exist, whatever the umask."""

import os
from pathlib import Path

PRIVATE_MODE = 0o600


def private_write_text(*, path: Path, text: str) -> None:
    """Writes `text` to `path`, made 0600 (an existing file too), never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 PRIVATE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        # The umask only narrows the mode at creation; a file that was there keeps its own.
        os.fchmod(handle.fileno(), PRIVATE_MODE)
        handle.write(text)
