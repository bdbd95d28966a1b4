"""kombu's filesystem transport (the embedded broker of `make run`), with its exchange tables
made whole before anyone reads them.

kombu creates a table by opening it for writing and only then locking it: a second process
binding to the same exchange in between (two Celery workers starting together both bind the
remote-control exchange, `celery.pidbox`) finds the file there but empty, fails to parse it, and
dies (kombu 5.7). Here a table appears only with its JSON in it, by a hard link of a finished
file, so kombu's own update path (open, lock, read, write) is the only one ever taken.
"""

import contextlib
import os
import uuid
from typing import Any

from kombu.transport import filesystem


class FilesystemChannel(filesystem.Channel):
    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> Any:
        table = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        if not table.exists():
            staged = table.with_name(f".{table.name}.{uuid.uuid4().hex}")
            staged.write_bytes(b"[]")
            try:
                with contextlib.suppress(FileExistsError):  # another process made it first
                    os.link(staged, table)
            finally:
                staged.unlink()
        return super()._queue_bind(exchange, routing_key, pattern, queue)


class FilesystemTransport(filesystem.Transport):
    Channel = FilesystemChannel
