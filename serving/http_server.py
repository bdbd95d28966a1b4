"""The REST port: the standard library's ThreadingHTTPServer in front of RestApi.

The REST layer only moves bytes (every answer is built by RestApi), so the stdlib server is
enough and adds no dependency; HTTP/1.1 keep-alive, chunked request bodies and
`Expect: 100-continue` (sent by curl for larger bodies) are handled here.
"""

from __future__ import annotations

import logging
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from serving import rjson
from serving.errors import Code, ServingError
from serving.rest_api import PATH_PREFIX, RestApi

log = logging.getLogger(__name__)

_MAX_BODY = 2**31 - 1
_ORIGIN = re.compile(r"https?://")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # the stdlib's backlog of 5 refuses bursts of new clients

    def __init__(self, address: tuple[str, int], api: RestApi, cors: bool) -> None:
        self.api = api
        self.cors = cors
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 120  # closes idle keep-alive connections, each of which holds a thread
    # Headers and body go out in two writes; with Nagle's algorithm the body then waits for
    # the client's delayed ACK of the headers (40 ms on Linux) on every keep-alive request.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline().strip():
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            raise ValueError("request body too large")
        return self.rfile.read(length) if length else b""

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if self.server.cors:
            self.send_header("Access-Control-Allow-Origin", "*")
            self.send_header("Access-Control-Allow-Methods", "POST, GET")
            self.send_header("Access-Control-Allow-Headers", "Content-Type")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _dispatch(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            body = self._read_body()
        except ValueError:
            self.close_connection = True
            self._reply(400, rjson.error_body("Malformed request body").encode())
            return
        if not PATH_PREFIX.fullmatch(path):
            self._reply(404, b"<HTML><HEAD><TITLE>404 Not Found</TITLE></HEAD></HTML>", "text/html")
            return
        if self.command == "OPTIONS":
            # CORS preflight, answered before the API handler as TF Serving does.
            if _ORIGIN.search(self.headers.get("Origin", "")):
                self._reply(200, b"")
            else:
                error = ServingError(
                    Code.FAILED_PRECONDITION, "Origin header is missing in CORS preflight"
                )
                self._reply(error.http_status, rjson.error_body(error.message).encode())
            return
        status, payload = self.server.api.handle(method=self.command, path=path, body=body)
        self._reply(status, payload)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _dispatch


class RestServer:
    def __init__(self, *, api: RestApi, host: str, port: int, cors: bool = False) -> None:
        self._server = _Server((host, port), api, cors)
        self._thread = threading.Thread(
            # A short poll interval only makes shutdown() prompt; requests never wait on it.
            target=lambda: self._server.serve_forever(poll_interval=0.05),
            name="rest-api",
            daemon=True,
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
