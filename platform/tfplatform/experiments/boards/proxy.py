"""A browser's request to a board, passed on with the board's token and none of the browser's
credentials; the answer streamed back."""

import re
from collections.abc import Iterator

import requests
from django.http import HttpRequest, StreamingHttpResponse

from tfplatform.core.errors import NotFound, Unavailable
from tfplatform.experiments.boards.registry import (
    URL_PREFIX,
    board_alive,
    board_ensure,
    board_experiments,
    board_record_read,
    board_runs,
    board_touch,
)

CHUNK_BYTES = 64 * 1024
# What of the browser's request TensorBoard gets: never its cookies, authorization or address.
REQUEST_HEADERS = ("Accept", "Accept-Encoding", "Accept-Language", "Content-Type",
                   "If-Modified-Since", "If-None-Match", "X-XSRF-Protected")
RESPONSE_HEADERS = ("Content-Type", "Content-Encoding", "Content-Length", "Cache-Control",
                    "ETag", "Expires", "Last-Modified", "Content-Security-Policy")

_session = requests.Session()
_session.headers.clear()  # the browser's Accept-Encoding, or none: the body is passed as it comes


def board_proxy(*, request: HttpRequest, key: str) -> StreamingHttpResponse:
    """The request, sent on to the board (whose experiments the caller has checked the user may
    see) with the board's token and none of the browser's credentials; the answer streamed."""
    prefix = f"{URL_PREFIX}/{key}/"
    path = request.get_full_path()
    if not (path.startswith(prefix) or path == prefix[:-1]):
        raise NotFound("TensorBoard not found.")
    board = board_record_read(key)
    # TensorBoard's pages ask for the runs when opened and on every reload: a run folder that
    # appeared meanwhile (the experiment was queued) restarts the board, so it shows up.
    refresh = request.path.endswith("/data/runs")
    if board is None or not board_alive(board) or refresh:
        experiments = board_experiments(user=request.user, key=key)
        if (board is None or board.runs != board_runs(experiments=experiments)
                or not board_alive(board)):
            board = board_ensure(experiments=experiments, fresh=True)
    board_touch(key)
    headers = {name: request.headers[name] for name in REQUEST_HEADERS if name in request.headers}
    headers["X-Tfplatform-Board"] = board.token
    try:
        upstream = _session.request(
            request.method or "GET", f"http://127.0.0.1:{board.port}{path}", headers=headers,
            data=request.body if request.method == "POST" else None, stream=True,
            allow_redirects=False, timeout=(5, 120),
        )
    except requests.RequestException as error:
        raise Unavailable(
            "TensorBoard is not answering; open it again from the experiment."
        ) from error
    response = StreamingHttpResponse(_chunks(upstream), status=upstream.status_code)
    for name in RESPONSE_HEADERS:
        if name in upstream.headers:
            response[name] = upstream.headers[name]
    if "Content-Security-Policy" in response:  # framed by no other site (as X-Frame-Options)
        kept = [rule for rule in response["Content-Security-Policy"].split(";")
                if rule.strip() and not rule.strip().startswith("frame-ancestors")]
        response["Content-Security-Policy"] = ";".join([*kept, "frame-ancestors 'self'"])
    location = upstream.headers.get("Location", "")
    if location:
        location = re.sub(r"^https?://127\.0\.0\.1:\d+", "", location)
        if location.startswith(prefix[:-1]):
            response["Location"] = location
    return response


def _chunks(upstream: requests.Response) -> Iterator[bytes]:
    try:
        yield from upstream.raw.stream(CHUNK_BYTES, decode_content=False)
    finally:
        upstream.close()
