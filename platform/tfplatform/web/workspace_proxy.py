"""The only way into a workspace: an ASGI proxy for `/workspaces/<id>/lab/…`, HTTP and websockets.

Every request (and every websocket handshake) is checked: the Django session cookie or an API
token (`Authorization: Token …`) names a user, and the workspace must be theirs with a running
session; anything else is 404, whatever the path. The request then goes to the session's Jupyter
on its Unix socket (or, with PLATFORM_WORKSPACE_RELAY_PORT, through the relay of the session's
node: tfplatform/workspaces/relay.py) with Jupyter's token added as an `Authorization` header,
so that token never appears in a URL, a page or the browser. The platform's own credentials
(session and CSRF cookies, the client's Authorization header) never reach Jupyter, where user
code runs.

What Jupyter answers is the user's code's too: its `Set-Cookie` headers are dropped (cookies
ignore ports, so they would land on the platform's host), and every answer carries the
platform's Content-Security-Policy besides any of Jupyter's (a browser enforces both, so
Jupyter's stricter sandbox of `/files/` holds). With `PLATFORM_WORKSPACE_LAB_ORIGIN` set, the
lab answers on that origin only and nothing else answers there (`lab_origin_misroute`), so a
page in the lab cannot read the platform's pages with the user's session.

Served by `tfplatform.config.asgi` (uvicorn), beside the Django ASGI application.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user
from django.db import close_old_connections
from django.http import HttpRequest

from tfplatform.accounts.tokens import api_token_check
from tfplatform.cluster.models import Allocation
from tfplatform.core.errors import NotFound
from tfplatform.experiments.models import Experiment
from tfplatform.workspaces.relay import relay_connect, relay_greeting
from tfplatform.workspaces.selectors import workspace_get
from tfplatform.workspaces.services import workspace_jupyter_token, workspace_socket

logger = logging.getLogger(__name__)
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

PATH = re.compile(r"^/workspaces/(?P<id>[0-9]{1,18})/lab(?:/|$)")
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length", "authorization", "cookie",
    "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
    "sec-websocket-protocol",
}
# Jupyter's answers never set cookies (see the module's docstring).
FROM_UPSTREAM_DROPPED = {"set-cookie", "set-cookie2"}
# JupyterLab needs its scripts, forms, dialogs, downloads and new tabs, and its own origin (its
# API and websockets, same-origin); it may frame itself, nobody else may frame it, and it may
# neither load plugins nor move its base or forms elsewhere. The sandbox keeps its origin but
# takes away what a sandbox takes away regardless (document.domain, top navigation of a frame
# that embeds it, plugins).
LAB_POLICY = (
    "sandbox allow-scripts allow-same-origin allow-forms allow-modals allow-downloads "
    "allow-popups; frame-ancestors 'self'; base-uri 'self'; form-action 'self'; object-src 'none'"
)
UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
NOT_FOUND = b'{"error": "Workspace not found.", "code": "not_found"}'


def workspace_path(path: str) -> int | None:
    found = PATH.match(path)
    return int(found["id"]) if found else None


def lab_origin_misroute(scope: Scope) -> bool:
    """True for a lab path off the lab's origin, or anything else on it (answered 404); with no
    lab origin configured the lab shares the platform's, and nothing is misrouted."""
    origin = settings.PLATFORM.workspace_lab_origin
    if not origin:
        return False
    lab = urlsplit(origin)
    default = 443 if lab.scheme == "https" else 80
    on_lab_origin = (_host_port(_headers(scope).get("host", ""), default=default)
                     == _host_port(lab.netloc, default=default))
    return on_lab_origin != (workspace_path(scope["path"]) is not None)


def _host_port(netloc: str, *, default: int) -> tuple[str, int]:
    """`host[:port]` as the browser means it (a Host header leaves a default port out)."""
    found = urlsplit(f"//{netloc}")
    try:
        return (found.hostname or "", found.port or default)
    except ValueError:  # not a port: matches no origin
        return ("", -1)


@dataclass(frozen=True)
class Upstream:
    socket: str
    token: str
    # The session's node (address, relay port) where the cluster relays workspaces.
    relay: tuple[str, int] | None = None
    greeting: bytes = b""

    def connector(self) -> aiohttp.BaseConnector:
        if self.relay is None:
            return aiohttp.UnixConnector(path=self.socket)
        return RelayConnector(host=self.relay[0], port=self.relay[1], greeting=self.greeting)


class RelayConnector(aiohttp.BaseConnector):
    """Connections to a Jupyter on another machine, through its node's relay (as aiohttp's
    UnixConnector makes them to a socket)."""

    def __init__(self, *, host: str, port: int, greeting: bytes) -> None:
        super().__init__()
        self._host, self._port, self._greeting = host, port, greeting

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
        sock = await asyncio.wait_for(
            relay_connect(host=self._host, port=self._port, greeting=self._greeting),
            timeout.sock_connect)
        _, proto = await self._loop.create_connection(self._factory, sock=sock)
        return proto


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _user_of(headers: dict[str, str]) -> Any:
    """The user the request's API token or session cookie names, or None."""
    authorization = headers.get("authorization", "")
    scheme, _, key = authorization.partition(" ")
    if scheme.lower() in ("token", "bearer") and key:
        token = api_token_check(key=key.strip())
        if token is not None:
            return token.user
    cookies = SimpleCookie()
    cookies.load(headers.get("cookie", ""))
    morsel = cookies.get(settings.SESSION_COOKIE_NAME)
    if morsel is None:
        return None
    from importlib import import_module

    request = HttpRequest()
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(morsel.value)
    user = get_user(request)  # checks the session's auth hash, like the middleware
    return user if user.is_authenticated else None


def upstream_for(*, workspace_id: int, headers: dict[str, str]) -> Upstream | None:
    """Where this request may go, or None (answered 404): checked on every request."""
    # In an executor thread, outside Django's request cycle: connections are kept or closed
    # (CONN_MAX_AGE) as a Django request's would be.
    close_old_connections()
    try:
        return _upstream_for(workspace_id=workspace_id, headers=headers)
    finally:
        close_old_connections()


def _upstream_for(*, workspace_id: int, headers: dict[str, str]) -> Upstream | None:
    user = _user_of(headers)
    if user is None:
        return None
    try:
        workspace = workspace_get(user=user, workspace_id=workspace_id)
    except NotFound:
        return None
    session = workspace.experiment
    if session is None or session.state != Experiment.State.RUNNING:
        return None
    socket = workspace_socket(owner_id=workspace.owner_id, experiment_id=session.pk)
    token = workspace_jupyter_token(experiment_id=session.pk)
    relay_port = settings.PLATFORM.workspace_relay_port
    if not relay_port:
        return Upstream(socket=str(socket), token=token)
    held = Allocation.objects.filter(trial__experiment=session, released_at__isnull=True
                                     ).select_related("node").first()
    if held is None:
        return None
    return Upstream(socket=str(socket), token=token, relay=(held.node.address, relay_port),
                    greeting=relay_greeting(owner_id=workspace.owner_id,
                                            experiment_id=session.pk))


def _same_origin(headers: dict[str, str]) -> bool:
    """A browser's cross-site request (CSRF, websocket hijacking) never reaches Jupyter."""
    origin = headers.get("origin")
    if origin is None:
        return headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")
    return urlsplit(origin).netloc == headers.get("host", "")


def _forwarded(headers: dict[str, str], *, token: str) -> dict[str, str]:
    kept = {k: v for k, v in headers.items() if k not in HOP_BY_HOP}
    cookies = SimpleCookie()
    cookies.load(headers.get("cookie", ""))
    own = {settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME}
    rest = "; ".join(f"{k}={m.value}" for k, m in cookies.items() if k not in own)
    if rest:
        kept["cookie"] = rest
    kept["authorization"] = f"token {token}"
    kept["host"] = headers.get("host", "localhost")
    return kept


async def workspace_not_found(scope: Scope, send: Send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 4404})
        return
    await send({"type": "http.response.start", "status": 404,
                "headers": [(b"content-type", b"application/json"), *_policy()]})
    await send({"type": "http.response.body", "body": NOT_FOUND})


def _target(scope: Scope) -> str:
    raw = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string") or b""
    return raw.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")


async def workspace_proxy(scope: Scope, receive: Receive, send: Send) -> None:
    workspace_id = workspace_path(scope["path"])
    headers = _headers(scope)
    upstream = None
    if workspace_id is not None:
        upstream = await sync_to_async(upstream_for, thread_sensitive=False)(
            workspace_id=workspace_id, headers=headers)
    if upstream is None:
        await workspace_not_found(scope, send)
        return
    unsafe = scope["type"] == "websocket" or scope["method"] in UNSAFE
    if unsafe and not _same_origin(headers):
        await workspace_not_found(scope, send)
        return
    forwarded = _forwarded(headers, token=upstream.token)
    connector = upstream.connector()
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                     timeout=timeout) as client:
        try:
            if scope["type"] == "websocket":
                await _websocket(scope, receive, send, client=client, headers=forwarded)
            else:
                await _http(scope, receive, send, client=client, headers=forwarded)
        except (aiohttp.ClientConnectionError, aiohttp.WSServerHandshakeError, OSError,
                TimeoutError) as error:
            logger.warning("Workspace %s unreachable: %s", workspace_id, error)
            await _unavailable(scope, send)


def _policy() -> list[tuple[bytes, bytes]]:
    return [(b"content-security-policy", LAB_POLICY.encode())]


async def _unavailable(scope: Scope, send: Send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1011})
        return
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"), *_policy()]})
    await send({"type": "http.response.body",
                "body": b'{"error": "The workspace is starting or stopping.", "code": '
                        b'"unavailable"}'})


async def _http(scope: Scope, receive: Receive, send: Send, *, client: aiohttp.ClientSession,
                headers: dict[str, str]) -> None:
    body = bytearray()
    limit = settings.PLATFORM.max_upload_bytes
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > limit:
            await send({"type": "http.response.start", "status": 413, "headers": _policy()})
            await send({"type": "http.response.body", "body": b""})
            return
        if not message.get("more_body"):
            break
    async with client.request(scope["method"], f"http://localhost{_target(scope)}",
                              headers=headers, data=bytes(body) or None,
                              allow_redirects=False) as response:
        out = [(k.lower().encode("latin-1"), v.encode("latin-1"))
               for k, v in response.headers.items()
               if k.lower() not in HOP_BY_HOP and k.lower() not in FROM_UPSTREAM_DROPPED]
        out += _policy()
        await send({"type": "http.response.start", "status": response.status, "headers": out})
        async for chunk in response.content.iter_any():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


async def _websocket(scope: Scope, receive: Receive, send: Send, *,
                     client: aiohttp.ClientSession, headers: dict[str, str]) -> None:
    connect = await receive()
    if connect["type"] != "websocket.connect":
        return
    protocols = tuple(scope.get("subprotocols") or ())
    upstream = await client.ws_connect(f"http://localhost{_target(scope)}", headers=headers,
                                       protocols=protocols, autoping=True, max_msg_size=0)
    await send({"type": "websocket.accept", "subprotocol": upstream.protocol})

    async def from_client() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                await upstream.close()
                return
            if message.get("text") is not None:
                await upstream.send_str(message["text"])
            elif message.get("bytes") is not None:
                await upstream.send_bytes(message["bytes"])

    async def from_upstream() -> None:
        async for message in upstream:
            if message.type == aiohttp.WSMsgType.TEXT:
                await send({"type": "websocket.send", "text": message.data})
            elif message.type == aiohttp.WSMsgType.BINARY:
                await send({"type": "websocket.send", "bytes": message.data})
            else:
                break
        code = upstream.close_code
        # 1005, 1006 and 1015 describe a close; they are never sent in one.
        await send({"type": "websocket.close",
                    "code": code if code and code not in (1005, 1006, 1015) else 1000})

    tasks = [asyncio.ensure_future(from_client()), asyncio.ensure_future(from_upstream())]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await upstream.close()
