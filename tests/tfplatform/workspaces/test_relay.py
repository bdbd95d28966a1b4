"""A node's workspace relay: only the platform's greeting for a session the node has a socket
for gets through, and then every byte does, both ways."""

import asyncio
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import live
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.workspaces import relay as relay_module
from tfplatform.workspaces.relay import (
    PROTOCOL,
    Relay,
    relay_connect,
    relay_greeting,
    relay_greeting_check,
    relay_start,
)
from tfplatform.workspaces.services import workspace_socket

OWNER, SESSION = 7, 42


def test_a_greeting_names_its_session_and_no_other() -> None:
    greeting = relay_greeting(owner_id=OWNER, experiment_id=SESSION)
    assert relay_greeting_check(line=greeting) == (OWNER, SESSION)
    _, owner, session, mac = greeting.rstrip(b"\n").split(b" ")
    # Its last character changed: to "0" unless it is one already (then the "forgery" was the
    # greeting itself, accepted once in 16 runs).
    altered = mac[:-1] + (b"1" if mac.endswith(b"0") else b"0")
    forged = [
        b"%s 8 %s %s\n" % (PROTOCOL, session, mac),  # another owner's home
        b"%s %s 43 %s\n" % (PROTOCOL, owner, mac),  # another session
        b"%s %s %s %s\n" % (PROTOCOL, owner, session, altered),
        b"TFP-RELAY/2 %s %s %s\n" % (owner, session, mac),
        b"%s -7 %s %s\n" % (PROTOCOL, session, mac),
        b"%s %s %s\n" % (PROTOCOL, owner, session),
        b"GET / HTTP/1.1\r\n",
    ]
    assert [relay_greeting_check(line=line) for line in forged] == [None] * len(forged)


def test_a_greeting_made_with_another_secret_key_is_refused(settings: object) -> None:
    greeting = relay_greeting(owner_id=OWNER, experiment_id=SESSION)
    settings.SECRET_KEY = "another-installation-" + "x" * 40  # type: ignore[attr-defined]
    assert relay_greeting_check(line=greeting) is None


@pytest.fixture
def home(platform_settings_override: PlatformSettingsOverride) -> Iterator[Path]:
    """Homes under a short path: a Unix socket's path has at most 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="rly-"))
    platform_settings_override(home_dir=folder)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def jupyter(home: Path) -> Iterator[Path]:
    """Where the session's Jupyter would listen: an echo server on its socket."""
    path = workspace_socket(owner_id=OWNER, experiment_id=SESSION)
    path.parent.mkdir(parents=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()

    def echo() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                while data := connection.recv(65536):
                    connection.sendall(data)

    threading.Thread(target=echo, daemon=True).start()
    yield path
    server.close()


@pytest.fixture
def relay() -> Iterator[Relay]:
    started = relay_start(address="127.0.0.1", port=live.free_port())
    yield started
    started.close()


def _through(relay: Relay, greeting: bytes, payload: bytes) -> bytes:
    async def exchange() -> bytes:
        sock = await relay_connect(host="127.0.0.1", port=relay.port, greeting=greeting)
        reader, writer = await asyncio.open_connection(sock=sock)
        writer.write(payload)
        writer.write_eof()  # the relay passes the half-close on; the echo then ends
        answer = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        return answer

    return asyncio.run(exchange())


def test_the_platforms_greeting_reaches_the_sessions_socket_and_every_byte_comes_back(
    jupyter: Path, relay: Relay,
) -> None:
    payload = bytes(range(256)) * 1024  # more than one read of either side
    greeting = relay_greeting(owner_id=OWNER, experiment_id=SESSION)
    assert _through(relay, greeting, payload) == payload


def test_a_forged_greeting_or_a_session_without_a_socket_is_refused(
    jupyter: Path, relay: Relay, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(relay_module, "GREETING_SECONDS", 0.5)
    forged = relay_greeting(owner_id=OWNER, experiment_id=SESSION).replace(b" 42 ", b" 41 ")
    gone = relay_greeting(owner_id=OWNER, experiment_id=SESSION + 1)  # no socket on this node
    for greeting in (forged, gone, b"\n", b"x" * 300 + b"\n"):
        with pytest.raises(ConnectionRefusedError, match="no such session"):
            _through(relay, greeting, b"GET / HTTP/1.1\r\n\r\n")
    # A client that says nothing is dropped after a while; the relay still serves.
    with socket.create_connection(("127.0.0.1", relay.port), timeout=30) as silent:
        assert silent.recv(16) == b"NO\n"
    greeting = relay_greeting(owner_id=OWNER, experiment_id=SESSION)
    assert _through(relay, greeting, b"still here") == b"still here"


def test_a_port_in_use_fails_the_start_saying_so(relay: Relay) -> None:
    with pytest.raises(OSError, match="in use"):
        relay_start(address="127.0.0.1", port=relay.port)
