"""The node's fork server (trial/forkserver.py): sandboxed tasks forked from one process that
imported TensorFlow, instead of each importing it (nearly all of a small task's CPU).

    server = fork_server(runtime=..., python=..., env=...)  # None: tasks start cold
    host = host_start(...)   # hosts.py: a ForkedHost, bubblewrap around trial/holder.py

The sandbox is built exactly as for a cold host, by bubblewrap with the same options, but
around trial/holder.py, which stays its pid 1. Once the holder says the sandbox is built, the
host's `hand` sends the order to the fork server with a pidfd of the holder; the server's child
joins the sandbox, and its own child becomes the task (entry.py gives it what bubblewrap gives
its own process). To the supervisor it is the same host: the same process (bubblewrap), the
same pid 1, the same exit code.

Only a node run as root has one, only for its own Python (an environment's venv could run
code at import), and only under the sandbox runtime. One per process: a worker node's, or a
test's that supervises trials itself; or one per machine (PLATFORM_TASK_FORK_SERVER_SOCKET),
which every node of the machine connects to, each starting its own while none answers there.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import socket
import subprocess
import threading
import time
from typing import Any

from training.isolation.runtime import Runtime, TaskPython, node_privileged

# A server that keeps dying (its import failing, say) is not started again and again: after this
# many starts within the window, tasks start cold until the window has passed.
SERVER_STARTS_MAX = 3
SERVER_STARTS_WINDOW_SECONDS = 600.0
CLOSE_GRACE_SECONDS = 2.0
SOCKET_WAIT_SECONDS = 10.0


class ForkServer:
    """A channel to a fork server: this process' own (`start`), or the machine's (`connect`)."""

    def __init__(self, *, channel: socket.socket, process: subprocess.Popen[bytes] | None = None,
                 socket_path: str | None = None) -> None:
        self.channel = channel
        self.process = process
        self.socket_path = socket_path  # where it also serves the machine's nodes
        self._lock = threading.Lock()

    @classmethod
    def start(cls, *, python: TaskPython, env: dict[str, str],
              socket_path: str | None = None) -> ForkServer:
        """A server that ends when this process closes it (or dies). With `socket_path`, it is
        also the machine's (its folder this user's, mode 0700): every node of the machine that
        connects there is served too, with `env` the base environment of their tasks."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        where = ["--channel-fd", str(child.fileno())]
        where += ["--socket", socket_path] if socket_path is not None else []
        try:
            process = _server_popen(python=python, env=env, where=where,
                                    pass_fds=(child.fileno(),))
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        if socket_path is not None:
            # Bound before its import: a node started next finds it (and waits for the import).
            deadline = time.monotonic() + SOCKET_WAIT_SECONDS
            while (not os.path.exists(socket_path) and process.poll() is None
                   and time.monotonic() < deadline):
                time.sleep(0.01)
        return cls(channel=parent, process=process, socket_path=socket_path)

    @classmethod
    def connect(cls, *, path: str) -> ForkServer | None:
        """The machine's server at `path`; None where none answers there."""
        channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            channel.connect(path)
        except OSError:
            channel.close()
            return None
        return cls(channel=channel, socket_path=path)

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        # The server never writes: a readable channel is its end closed.
        try:
            readable, _, _ = select.select([self.channel], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def fork(self, *, order: dict[str, Any], holder_pid: int, fds: list[int]) -> bool:
        """Asks for the task; False when the server is gone (the caller starts a cold host).

        The order travels in a memfd the server passes on unread: it holds a workspace's tokens,
        and whatever the server's memory ever held, every task forked after it would copy."""
        order_fd = os.memfd_create("order", os.MFD_CLOEXEC)
        try:
            os.write(order_fd, json.dumps(order).encode())
            os.lseek(order_fd, 0, os.SEEK_SET)  # the task reads it from the start
            message = json.dumps({"holder_pid": holder_pid}).encode()
            with self._lock:
                if not self.alive():
                    return False
                try:
                    socket.send_fds(self.channel, [message], [*fds, order_fd])
                except OSError:
                    return False
        finally:
            os.close(order_fd)
        return True

    def close(self) -> None:
        """EOF on its channel ends a node's own server (the machine's serves on); the tasks it
        made live on, each with its sandbox."""
        with self._lock:
            self.channel.close()
        if self.process is None:
            return
        try:
            self.process.wait(timeout=CLOSE_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()  # still importing: it has made nothing
            self.process.wait()


def _server_popen(*, python: TaskPython, env: dict[str, str], where: list[str],
                  pass_fds: tuple[int, ...]) -> subprocess.Popen[bytes]:
    # `/` and -P: nothing a tenant wrote is on its path; it runs outside any sandbox.
    # It writes nothing after its import, and a failed import shows again in the log of
    # the cold host that replaces it; no trial's folder gets a log shared by others.
    return subprocess.Popen(
        [python.executable, "-P", "-m", "training.trial.forkserver", *where],
        cwd="/", env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, pass_fds=pass_fds, start_new_session=True,
    )


_server: ForkServer | None = None
_starts: list[float] = []
_lock = threading.Lock()


def fork_server_used(*, runtime: Runtime, python: TaskPython | None = None) -> bool:
    """Whether this node forks the tasks of `python` (the node's own if None)."""
    return (runtime.fork_server and runtime.name == "sandbox"
            and (python or TaskPython()) == TaskPython() and node_privileged())


def fork_server(*, runtime: Runtime, python: TaskPython,
                env: dict[str, str]) -> ForkServer | None:
    """This process' fork server, started on first use (its import overlaps the first task's
    sandbox being built); None where tasks start cold."""
    global _server
    if not fork_server_used(runtime=runtime, python=python):
        return None
    with _lock:
        if _server is not None and _server.alive():
            return _server
        if _server is not None:
            _server.close()
            _server = None
        if runtime.fork_server_socket:
            _server = ForkServer.connect(path=runtime.fork_server_socket)
            if _server is not None:
                return _server
            # None there (not started yet, or restarting): this node's own, as without one.
        now = time.monotonic()
        _starts[:] = [t for t in _starts if now - t < SERVER_STARTS_WINDOW_SECONDS]
        if len(_starts) >= SERVER_STARTS_MAX:
            return None
        _starts.append(now)
        _server = ForkServer.start(python=python, env=env)
        return _server


def fork_server_close() -> None:
    global _server
    with _lock:
        if _server is not None:
            _server.close()
            _server = None


atexit.register(fork_server_close)
