"""The front on the REST port: a user's call is rewritten to the version it is routed to, and
then served as the platform's own calls are."""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import quote

from serving import rjson
from serving.errors import Code, ServingError
from serving.front import Front, access_table_from_wire
from serving.rest_paths import MODEL_STATUS, PREDICTION, path_decode

_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class FrontCall:
    path: str  # the request's path, naming the routed version
    headers: dict[str, str]  # X-Model-Version and X-Model-Label, as the web app answers


def front_rest_call(*, front: Front, method: str, path: str, presented: str | None) -> FrontCall:
    """ServingError for a call `presented` may not make; the path to serve it with otherwise.
    Only TF Serving's model calls are open: predict, classify, regress, status, metadata."""
    caller = front.caller(presented)
    if method == "POST" and (match := PREDICTION.fullmatch(path)):
        name_raw, version_raw, label_raw, call = match.groups()
        call = call.lower()
        suffix = f":{call}"
    elif method == "GET" and (match := MODEL_STATUS.fullmatch(path)) and match.group(1):
        name_raw, version_raw, label_raw, metadata = match.groups()
        call = "metadata" if metadata else "status"
        suffix = "/metadata" if metadata else ""
    else:
        raise ServingError(Code.NOT_FOUND, f"Not found: {method} {path}")
    version = int(version_raw) if version_raw else None
    if version is not None and version > _INT64_MAX:
        return FrontCall(path=path, headers={})  # the server's own error for it
    routed = front.route(caller=caller, name=path_decode(name_raw), call=call, version=version,
                         label=path_decode(label_raw) if label_raw else None)
    where = ""
    if routed.version is not None:
        where = f"/versions/{routed.version}"
    elif routed.label is not None:
        where = f"/labels/{quote(routed.label, safe='')}"
    headers = {}
    if routed.version is not None:
        headers["X-Model-Version"] = str(routed.version)
    if routed.label:
        headers["X-Model-Label"] = routed.label
    return FrontCall(path=f"/v1/models/{name_raw}{where}{suffix}", headers=headers)


def front_access_push(*, front: Front, method: str, body: bytes) -> tuple[int, bytes]:
    """(status, body) of a push of the access table, already let in by the server's own token:
    the table replaces the front's whole, or nothing changes."""
    if method != "PUT":
        return 405, rjson.error_body("PUT the access table.").encode()
    try:
        table = access_table_from_wire(json.loads(body))
    except ValueError as error:  # json's errors are ValueErrors too
        return 400, rjson.error_body(str(error)).encode()
    front.table_set(table)
    return 204, b""
