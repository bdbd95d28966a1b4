"""How a barrier task's events and output reach its supervisor across the Spark cluster.

A task's trial process writes its events and output to files on the executor, as on a worker
node; the task forwards their lines over one TCP connection to the supervisor's listener. The
connection opens with a greeting that names the trial, the task and the stage attempt, with an
HMAC of them under a key only this attempt's supervisor and driver hold (the tasks get their
token in the Spark closure, never in the trial process' environment). Anything else that reaches
the port (another tenant's code on the cluster, a scan) is closed without a word, and what a
greeted task sends is bounded per line and per connection.

    listener = ChannelListener(host="0.0.0.0", key=key, trial_id="7", tasks={"worker:0", ...})
    ... task side: channel_open(address=..., token=task_token(key=key, ...), ...) then
        sender.event(line) / sender.output(line) / sender.exit(code)
    listener.drain() -> [Received(task, attempt, kind, data), ...]
"""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import socket
import threading
from dataclasses import dataclass

LINE_MAX = 64 * 1024
GREETING_MAX = 4096
GREETING_SECONDS = 10.0
# What one connection may send in all: a task that prints without end only loses its output.
CONNECTION_BYTES_MAX = 512 * 1024 * 1024
KINDS = ("event", "output", "exit")


def task_token(*, key: bytes, trial_id: str, task: str, attempt: str) -> str:
    message = json.dumps([trial_id, task, attempt]).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Received:
    task: str  # "worker:0": the greeting's, which its token proved
    attempt: str  # the Spark stage attempt the task ran in
    kind: str  # "event", "output", "exit", or "closed" when its connection ended
    data: str


class ChannelListener:
    """Accepts the tasks of one trial attempt; `drain()` returns what arrived since last time."""

    def __init__(self, *, host: str, key: bytes, trial_id: str, tasks: set[str]) -> None:
        self.key, self.trial_id, self.tasks = key, trial_id, frozenset(tasks)
        self._queue: queue.SimpleQueue[Received] = queue.SimpleQueue()
        self.refused = 0
        self._server = socket.create_server((host, 0), backlog=64)
        self.port = int(self._server.getsockname()[1])
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="spark-channel", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _greeting(self, stream: socket.SocketIO) -> tuple[str, str] | None:
        line = stream.readline(GREETING_MAX)
        try:
            hello = json.loads(line)
            trial, task, attempt, token = (str(hello[k]) for k in
                                           ("trial", "task", "attempt", "token"))
        except (ValueError, TypeError, KeyError):
            return None
        expected = task_token(key=self.key, trial_id=self.trial_id, task=task, attempt=attempt)
        if trial != self.trial_id or task not in self.tasks or not hmac.compare_digest(
                token.encode(), expected.encode()):
            return None
        return task, attempt

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(GREETING_SECONDS)
            stream = socket.SocketIO(connection, "rb")
            try:
                greeted = self._greeting(stream)
            except OSError:
                greeted = None
            if greeted is None:
                self.refused += 1
                return
            task, attempt = greeted
            connection.settimeout(None)
            received = 0
            try:
                while received < CONNECTION_BYTES_MAX:
                    line = stream.readline(LINE_MAX + 16)
                    if not line:
                        break
                    received += len(line)
                    kind, _, data = line.rstrip(b"\n").partition(b" ")
                    name = kind.decode("ascii", "replace")
                    if name in KINDS:
                        self._queue.put(Received(task, attempt, name,
                                                 data[:LINE_MAX].decode("utf-8", "replace")))
            except OSError:
                pass
            self._queue.put(Received(task, attempt, "closed", ""))

    def drain(self) -> list[Received]:
        found = []
        while True:
            try:
                found.append(self._queue.get_nowait())
            except queue.Empty:
                return found

    def close(self) -> None:
        self._closed.set()
        self._server.close()


class ChannelSender:
    """A task's end: one line per event, output line or its exit code."""

    def __init__(self, *, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()

    def _send(self, kind: str, data: bytes) -> None:
        line = kind.encode() + b" " + data.replace(b"\n", b" ")[:LINE_MAX] + b"\n"
        with self._lock:
            self._sock.sendall(line)

    def event(self, line: bytes) -> None:
        self._send("event", line)

    def output(self, line: bytes) -> None:
        self._send("output", line)

    def exit(self, code: int) -> None:
        self._send("exit", str(code).encode())

    def close(self) -> None:
        self._sock.close()


def channel_open(*, address: str, trial_id: str, task: str, attempt: str, token: str,
                 timeout_seconds: float = 30.0) -> ChannelSender:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout_seconds)
    sock.settimeout(None)
    hello = json.dumps({"trial": trial_id, "task": task, "attempt": attempt, "token": token})
    sock.sendall(hello.encode() + b"\n")
    return ChannelSender(sock=sock)
