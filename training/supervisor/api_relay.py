"""A workspace's one way out: a Unix socket the node relays to the platform's API, nothing else.

    relay = ApiRelay(path=attempt / "worker-0.api.sock", url="http://127.0.0.1:8000")
    ...                   # bound into the session's sandbox; `tfp` speaks HTTP over it
    relay.close()

The session has a network namespace of its own (loopback only), so no address of the node, of
the database or of another tenant exists for it. Each connection to the socket becomes one TCP
connection to the API's host and port, bytes copied both ways unchanged (TLS, if the API uses
it, stays end to end): the request names the API's host, and the API authenticates it as any
other, with the session's own token.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

# Where `tfp` in the session finds the socket (the CLI's client reads the same name).
API_SOCKET_ENV = "TFP_UNIX_SOCKET"
# A session has no reason for more at once; each costs the node two threads.
MAX_CONNECTIONS = 32
CHUNK_BYTES = 65536
CONNECT_TIMEOUT_SECONDS = 10.0


def api_address(*, url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"The API's address {url!r} is not an http(s) URL.")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


class ApiRelay:
    def __init__(self, *, path: Path, url: str, owner: int | None = None) -> None:
        """`owner`: the uid the socket is made over to (a container's user); None: this one."""
        self.path, self.address = path, api_address(url=url)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._closed = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._listener.bind(str(path))
        os.chmod(path, 0o600)  # a sandbox's user is the node's, mapped
        if owner is not None:
            os.chown(path, owner, owner)
        self._listener.listen(MAX_CONNECTIONS)
        threading.Thread(target=self._accept, name="api-relay", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                inside, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._slots.acquire(blocking=False):
                inside.close()
                continue
            threading.Thread(target=self._serve, args=(inside,), name="api-relay-conn",
                             daemon=True).start()

    def _serve(self, inside: socket.socket) -> None:
        try:
            try:
                outside = socket.create_connection(self.address, timeout=CONNECT_TIMEOUT_SECONDS)
            except OSError:
                return
            outside.settimeout(None)
            with outside:
                back = threading.Thread(target=_copy, args=(outside, inside), daemon=True)
                back.start()
                _copy(inside, outside)
                back.join()
        finally:
            inside.close()
            self._slots.release()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def _copy(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(CHUNK_BYTES):
            target.sendall(chunk)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)
