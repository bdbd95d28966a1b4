"""Event transport between a trial process and its supervisor: one JSON object per line.

Each task appends to its own file (never stdout: user code and TF print there), flushing every line
so the supervisor can tail it while the task runs. A killed task can leave half a line at the end;
`EventTail` only yields complete lines and keeps the rest for the next read.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, TextIO

from training.spec import TrialEvent


class EventWriter:
    def __init__(self, *, path: str, task: str, trial_id: str) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = Path(path).open("a", encoding="utf-8")  # noqa: SIM115 - long-lived
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


class EventTail:
    def __init__(self, *, path: str) -> None:
        self.path = Path(path)
        self._offset = 0
        self._partial = b""

    def read_new(self) -> list[TrialEvent]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read()
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        events = []
        for line in lines:
            if not line.strip():
                continue
            try:
                events.append(TrialEvent.from_json(line.decode("utf-8")))
            except (ValueError, TypeError):
                # A corrupt line (disk full, torn write) must not take the supervisor down.
                continue
        return events


def events_read(*, path: str) -> list[TrialEvent]:
    return EventTail(path=path).read_new()

