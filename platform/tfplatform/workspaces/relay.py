"""Workspaces across machines: a worker node relays the lab's connections to its sessions' Jupyter.

A session's Jupyter listens on a Unix socket in its owner's home, which connects only on the
machine that made it. With PLATFORM_WORKSPACE_RELAY_PORT set, every worker node listens on that
port of its --address, and the lab connects to the session's node instead of the socket. The
first line names the session and proves, with an HMAC of the secret key, that the platform
asks; the node answers OK and from then on passes bytes between that connection and the
session's socket. Jupyter's own token still guards every request behind it (the lab adds it),
and sandboxed tasks cannot connect to the port (Landlock allows them their gang's ports or the
API's only)."""

import asyncio
import contextlib
import hashlib
import hmac
import logging
import socket
import threading

from django.conf import settings

from tfplatform.workspaces.services import workspace_socket

logger = logging.getLogger(__name__)

PROTOCOL = b"TFP-RELAY/1"
ACCEPTED, REFUSED = b"OK\n", b"NO\n"
GREETING_BYTES = 200
GREETING_SECONDS = 10.0
CHUNK = 65536


def relay_greeting(*, owner_id: int, experiment_id: int) -> bytes:
    """What the lab sends first: the session, and the platform's proof that it asks."""
    mac = _mac(owner_id=owner_id, experiment_id=experiment_id).encode()
    return b"%s %d %d %s\n" % (PROTOCOL, owner_id, experiment_id, mac)


def relay_greeting_check(*, line: bytes) -> tuple[int, int] | None:
    """(owner, session) where the line is a greeting this platform made, else None."""
    parts = line.rstrip(b"\n").split(b" ")
    if len(parts) != 4 or parts[0] != PROTOCOL or not (parts[1] + parts[2]).isdigit():
        return None
    owner_id, experiment_id = int(parts[1]), int(parts[2])
    expected = _mac(owner_id=owner_id, experiment_id=experiment_id).encode()
    return (owner_id, experiment_id) if hmac.compare_digest(parts[3], expected) else None


def _mac(*, owner_id: int, experiment_id: int) -> str:
    message = f"workspace-relay:{owner_id}:{experiment_id}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()


async def relay_connect(*, host: str, port: int, greeting: bytes) -> socket.socket:
    """A connection to a session's Jupyter through its node, for the lab's HTTP client."""
    loop = asyncio.get_running_loop()
    family, kind, proto, _, address = (await loop.getaddrinfo(
        host, port, type=socket.SOCK_STREAM))[0]
    sock = socket.socket(family, kind, proto)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, address)
        await loop.sock_sendall(sock, greeting)
        answer = b""
        while len(answer) < len(ACCEPTED):  # exactly the answer: Jupyter's bytes come after
            chunk = await loop.sock_recv(sock, len(ACCEPTED) - len(answer))
            if not chunk:
                break
            answer += chunk
        if answer != ACCEPTED:
            raise ConnectionRefusedError(f"node {host}:{port} has no such session")
    except BaseException:
        sock.close()
        raise
    return sock


async def _relay_handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    try:
        line = await asyncio.wait_for(reader.readline(), GREETING_SECONDS)
        session = relay_greeting_check(line=line[:GREETING_BYTES])
        if session is not None:
            path = workspace_socket(owner_id=session[0], experiment_id=session[1])
            if path.is_socket():
                upstream = await asyncio.open_unix_connection(str(path))
    except (OSError, TimeoutError, ValueError):
        upstream = None
    if upstream is None:
        with contextlib.suppress(OSError):
            writer.write(REFUSED)
            await writer.drain()
        writer.close()
        return
    writer.write(ACCEPTED)
    await asyncio.gather(_pipe(reader, upstream[1]), _pipe(upstream[0], writer))
    for end in (writer, upstream[1]):
        end.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One direction, until its end closes; then the other side learns it (half-close)."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


def workspace_relay_node_start(*, address: str) -> None:
    """A node's relay, where the cluster relays workspaces (PLATFORM_WORKSPACE_RELAY_PORT)."""
    port = settings.PLATFORM.workspace_relay_port
    if port:
        relay_start(address=address, port=port)


class Relay:
    """A node's relay, served by a thread of its own until closed (or the node ends)."""

    def __init__(self, *, address: str, port: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(_relay_handle, host=address, port=port))
        self.port = self._server.sockets[0].getsockname()[1]
        self._thread = threading.Thread(target=self._loop.run_forever, name="workspace-relay",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


def relay_start(*, address: str, port: int) -> Relay:
    """Listens at once (a port in use fails the node's start, saying so), then serves."""
    relay = Relay(address=address, port=port)
    logger.info("Relaying workspaces on %s:%d", address, relay.port)
    return relay
