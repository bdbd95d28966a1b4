"""Real receivers for notifications: HTTP servers on 127.0.0.1 in threads of the test (plain or
TLS, answering as a test scripts them, or never), and an SMTP server (aiosmtpd)."""

import hashlib
import hmac
import http.server
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests import live
from tests.fixtures_settings import PlatformSettingsOverride


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Answers each POST with the next of `statuses` (then 200) and keeps what it got."""

    statuses: list[int] = field(default_factory=list)
    got: list[Received] = field(default_factory=list)
    server: http.server.ThreadingHTTPServer | None = None
    scheme: str = "http"
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"{self.scheme}://{self.host}:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _handler(receiver: Receiver) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            receiver.got.append(Received(path=self.path, headers=dict(self.headers.items()),
                                         body=body))
            status = receiver.statuses.pop(0) if receiver.statuses else 200
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", "http://127.0.0.1:9/elsewhere")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    """`receivers(statuses=[500, 200])`; `tls=(cert, key)` serves https, `host` names it."""
    made: list[Receiver] = []

    def start(*, statuses: list[int] | None = None, tls: tuple[Path, Path] | None = None,
              host: str = "127.0.0.1") -> Receiver:
        receiver = Receiver(statuses=list(statuses or []), host=host)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
        server.daemon_threads = True
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(certfile=tls[0], keyfile=tls[1])
            server.socket = context.wrap_socket(server.socket, server_side=True)
            receiver.scheme = "https"
        receiver.server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        made.append(receiver)
        return receiver

    yield start
    for receiver in made:
        receiver.close()


@pytest.fixture
def silent_receiver() -> Iterator[socket.socket]:
    """Takes connections (the kernel's backlog) and never answers; closing it resets them."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield listener
    listener.close()


@pytest.fixture
def loopback_allowed(platform_settings_override: PlatformSettingsOverride) -> None:
    """Staff allowed 127.0.0.1, where the tests' receivers listen; short waits and timeouts."""
    platform_settings_override(webhook_allowed_networks=("127.0.0.1/32",),
                               webhook_connect_timeout_seconds=2.0,
                               webhook_read_timeout_seconds=3.0,
                               notification_retry_seconds=0.1, notification_attempts=3)


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(envelope)
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_inbox(settings: Any) -> Iterator[Inbox]:
    """A real SMTP server on a free port of 127.0.0.1, which Django's SMTP backend sends to."""
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=live.free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    yield inbox
    controller.stop()


def signature_valid(*, secret: str, received: Received) -> bool:
    """What a receiver does (docs/user-guide/notifications.md): the HMAC-SHA256 of
    `<timestamp>.<body>` under the secret, compared in constant time."""
    timestamp = received.headers["X-TFP-Timestamp"]
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + received.body,
                        hashlib.sha256).hexdigest()
    return hmac.compare_digest(f"sha256={expected}", received.headers["X-TFP-Signature"])
