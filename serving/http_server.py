"""The REST port: aiohttp on an event loop of its own, in front of RestApi.

One loop thread reads, parses and answers every connection. A predict is parsed and checked on
the loop and handed to the batch scheduler without waiting; the loop awaits its future. So a
batch of answers wakes one thread, once, instead of every handler thread that waited on it, and
those threads no longer take turns at the GIL to write their answers. Anything that would block
the loop (the other calls, runs without batching, large bodies) runs in a thread pool.

aiohttp handles HTTP/1.1 keep-alive, chunked request bodies and `Expect: 100-continue` (sent by
curl for larger bodies), and sets TCP_NODELAY.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from serving import rjson
from serving.access import DENIED, HEADER, access_allowed
from serving.errors import Code, ServingError
from serving.front import ACCESS_PATH, Front
from serving.front_rest import FrontCall, front_access_push, front_rest_call
from serving.rest_api import RestApi
from serving.rest_paths import PATH_PREFIX

log = logging.getLogger(__name__)

_MAX_BODY = 2**31 - 1
_ORIGIN = re.compile(r"https?://")
# Larger bodies are parsed in the pool: a long parse on the loop would stall every connection.
_LOOP_PARSE_LIMIT = 64 * 1024
_IDLE_SECONDS = 120  # closes idle keep-alive connections
_NOT_FOUND = b"<HTML><HEAD><TITLE>404 Not Found</TITLE></HEAD></HTML>"


class RestServer:
    def __init__(self, *, api: RestApi, host: str, port: int, cors: bool = False,
                 threads: int | None = None, access_token: str = "", front: Front | None = None,
                 metrics: tuple[str, Callable[[], bytes]] | None = None) -> None:
        """`metrics`: (path, exposition) when --monitoring_config_file enables Prometheus.
        `front`: platform tokens are taken too (front_rest.py), and the platform pushes the
        access table to ACCESS_PATH with the server's own token."""
        self._api = api
        self._front = front
        self._cors = cors
        self._token = access_token
        self._metrics = metrics
        # Bound now, so a taken port fails here and port 0's choice is known before start().
        self._socket = socket.create_server((host, port), backlog=1024)
        self._pool = ThreadPoolExecutor(max_workers=threads or 4 * (os.cpu_count() or 1),
                                        thread_name_prefix="rest")
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="rest-api", daemon=True)

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        elif self._thread.ident is None:  # never started: the loop thread did not close it
            self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._socket.close()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_route("*", "/{path:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, keepalive_timeout=_IDLE_SECONDS,
                               shutdown_timeout=2.0)
        try:
            self._loop.run_until_complete(runner.setup())
            self._loop.run_until_complete(web.SockSite(runner, self._socket).start())
        finally:
            self._started.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(runner.cleanup())
            self._loop.close()

    async def _handle(self, request: web.Request) -> web.Response:
        path = request.raw_path.split("?", 1)[0]
        presented = request.headers.get(HEADER)
        routed: FrontCall | None = None
        if not access_allowed(token=self._token, presented=presented):
            if self._front is None:
                # Before the body is read: a caller without the token gets nothing of ours.
                return self._refuse(401, DENIED)
            try:
                routed = front_rest_call(front=self._front, method=request.method, path=path,
                                         presented=presented)
            except ServingError as error:
                return self._refuse(error.http_status, error.message)
            path = routed.path
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise
        except Exception:  # a body that ended early or broke its chunking
            response = self._reply(400, rjson.error_body("Malformed request body").encode())
            response.force_close()
            return response
        if routed is None and path == ACCESS_PATH and self._front is not None:
            return await self._access_push(request.method, body)
        if self._metrics is not None and path == self._metrics[0] and request.method == "GET":
            text = await self._loop.run_in_executor(self._pool, self._metrics[1])
            return self._reply(200, text, "text/plain")
        if not PATH_PREFIX.fullmatch(path):
            return self._reply(404, _NOT_FOUND, "text/html")
        if request.method == "OPTIONS":
            return self._preflight(request)
        answer = None
        if request.method == "POST" and len(body) <= _LOOP_PARSE_LIMIT:
            answer = await self._predict(path, body)
        if answer is None:
            answer = await self._loop.run_in_executor(self._pool, functools.partial(
                self._api.handle, method=request.method, path=path, body=body))
        response = self._reply(*answer)
        if routed is not None and answer[0] == 200:
            response.headers.update(routed.headers)
        return response

    async def _access_push(self, method: str, body: bytes) -> web.Response:
        assert self._front is not None
        answer = await self._loop.run_in_executor(self._pool, functools.partial(
            front_access_push, front=self._front, method=method, body=body))
        return self._reply(*answer)

    def _refuse(self, status: int, message: str) -> web.Response:
        # Before the body is read: a refused caller gets nothing of ours, not even a read.
        response = self._reply(status, rjson.error_body(message).encode())
        response.force_close()
        return response

    async def _predict(self, path: str, body: bytes) -> tuple[int, bytes] | None:
        call = self._api.predict_parse(path=path, body=body)
        if call is None or isinstance(call, tuple):
            return call
        done = self._api.predict_start(call, executor=self._pool)
        try:
            # Shielded: a cancelled wait must not cancel the task inside the batch scheduler.
            await asyncio.shield(asyncio.wrap_future(done))
        except asyncio.CancelledError:
            done.add_done_callback(lambda _: call.release.close())
            raise
        except Exception:  # noqa: S110 - predict_finish reads the error from `done`
            pass
        return self._api.predict_finish(call, done)

    def _preflight(self, request: web.Request) -> web.Response:
        # CORS preflight, answered before the API handler as TF Serving does.
        if _ORIGIN.search(request.headers.get("Origin", "")):
            return self._reply(200, b"")
        error = ServingError(Code.FAILED_PRECONDITION, "Origin header is missing in CORS preflight")
        return self._reply(error.http_status, rjson.error_body(error.message).encode())

    def _reply(self, status: int, body: bytes, content_type: str = "application/json"
               ) -> web.Response:
        response = web.Response(status=status, body=body, content_type=content_type)
        if self._cors:
            response.headers["Access-Control-Allow-Origin"] = "*"
            response.headers["Access-Control-Allow-Methods"] = "POST, GET"
            response.headers["Access-Control-Allow-Headers"] = "Content-Type"
        return response
