"""The gateway's REST port: TF Serving's model calls with a platform token, checked and routed by
the front (front_rest.front_rest_call, as in the embedded server), then forwarded to stock TF
Serving; and the access table's push, with the gateway's own token."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from serving import rjson
from serving.access import HEADER, access_allowed, access_header
from serving.errors import ServingError
from serving.front import ACCESS_PATH, Front
from serving.front_rest import front_access_push, front_rest_call

_MAX_BODY = 2**31 - 1
_IDLE_SECONDS = 120
_FORWARDED = ("Content-Type",)


class GatewayRest:
    def __init__(self, *, front: Front, token: str, upstream: str, upstream_token: str = "",
                 timeout_seconds: float = 300.0) -> None:
        self._front, self._token = front, token
        self._upstream_headers = access_header(token=upstream_token)
        self._upstream = upstream.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_route("*", "/{path:.*}", self._handle)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, app: web.Application) -> None:
        # One pool of keep-alive connections to TF Serving for every caller.
        self._session = aiohttp.ClientSession(timeout=self._timeout, auto_decompress=False)

    async def _close(self, app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.raw_path.split("?", 1)[0]
        presented = request.headers.get(HEADER)
        if path == ACCESS_PATH and access_allowed(token=self._token, presented=presented):
            return await self._access_push(request)
        try:
            routed = front_rest_call(front=self._front, method=request.method, path=path,
                                     presented=presented)
        except ServingError as error:
            # Before the body is read: a refused caller gets nothing of the model server's.
            response = _reply(error.http_status, rjson.error_body(error.message).encode())
            response.force_close()
            return response
        body = await request.read()
        headers = {k: request.headers[k] for k in _FORWARDED if k in request.headers}
        headers.update(self._upstream_headers)  # never the caller's own token
        assert self._session is not None
        try:
            async with self._session.request(request.method, self._upstream + routed.path,
                                             data=body, headers=headers) as answer:
                content = await answer.read()
                status, kind = answer.status, answer.headers.get("Content-Type", "")
        except (aiohttp.ClientError, TimeoutError) as error:
            return _reply(503, rjson.error_body(
                f"The model server could not be reached: {error or type(error).__name__}"
            ).encode())
        response = web.Response(status=status, body=content)
        if kind:
            response.headers["Content-Type"] = kind
        if status == 200:
            response.headers.update(routed.headers)
        return response

    async def _access_push(self, request: web.Request) -> web.Response:
        return _reply(*front_access_push(front=self._front, method=request.method,
                                         body=await request.read()))


def _reply(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json")
