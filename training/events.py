"""Event transport between a trial process and its supervisor: one JSON object per line.

Each task appends to its own file (never stdout: user code and TF print there), flushing every line
so the supervisor can tail it while the task runs. A killed task can leave half a line at the end;
`EventTail` only yields complete lines and keeps the rest for the next read.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from training.spec import TrialEvent


class EventWriter:
    def __init__(self, *, fd: int, task: str, trial_id: str) -> None:
        # The supervisor opened the file and passed the descriptor: a sandboxed task cannot
        # open anything of the supervisor's by name.
        self._file: TextIO = os.fdopen(fd, "a", encoding="utf-8")
        self.task = task
        self.trial_id = trial_id
        self._lock = threading.Lock()  # the throughput thread writes too

    def emit(self, kind: str, **payload: Any) -> TrialEvent:
        event = TrialEvent(kind=kind, payload=payload, task=self.task, trial_id=self.trial_id)
        with self._lock:
            self._file.write(event.to_json() + "\n")
            self._file.flush()
        return event

    def close(self) -> None:
        self._file.close()


class LineTail:
    """Complete new lines of a file a task writes, at most `max_bytes` per read.

    The task is untrusted: the file is opened without following links, a line longer than
    `max_line` is cut, and a task that writes faster than it is read only delays itself.
    """

    def __init__(self, *, path: str, max_bytes: int = 1 << 20, max_line: int = 64 * 1024) -> None:
        self.path = Path(path)
        self.max_bytes, self.max_line = max_bytes, max_line
        self._offset = 0
        self._partial = b""

    def read_lines(self) -> list[bytes]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return []
        with os.fdopen(fd, "rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read(self.max_bytes)
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > self.max_line:
            lines.append(self._partial)
            self._partial = b""
        return [line[: self.max_line] for line in lines]


class EventTail:
    """Events of one task; who sent them is the supervisor's knowledge, not the task's claim."""

    def __init__(self, *, path: str, task: str = "", trial_id: str = "") -> None:
        self._lines = LineTail(path=path)
        self.task, self.trial_id = task, trial_id

    def read_new(self) -> list[TrialEvent]:
        events = []
        for line in self._lines.read_lines():
            event = event_parse(line=line, task=self.task, trial_id=self.trial_id)
            if event is not None:
                events.append(event)
        return events


def event_parse(*, line: bytes, task: str, trial_id: str) -> TrialEvent | None:
    """One line a task wrote, as the event of `task` of `trial_id` (where given: the
    supervisor's knowledge wins over the line's claim); None for a blank or corrupt line."""
    if not line.strip():
        return None
    try:
        event = TrialEvent.from_json(line.decode("utf-8"))
        if not isinstance(event.kind, str) or not isinstance(event.payload, dict):
            return None
        return replace(event, task=task or event.task, trial_id=trial_id or event.trial_id,
                       time=float(event.time))
    except (ValueError, TypeError):
        # A corrupt line (disk full, torn write, or a hostile task) is dropped.
        return None
