"""The one place the platform talks to the model server (embedded or tensorflow/serving)."""

import http.client
import socket
import threading
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote, urlsplit

from django.conf import settings
from google.protobuf import text_format

from serving.client import ModelEntry, ModelServerClient, ModelServerError, model_server_config

LOAD_TIMEOUT_SECONDS = 120.0
PREDICT_TIMEOUT_SECONDS = 30.0
_connections = threading.local()


def model_server_client() -> ModelServerClient:
    """A process-wide client: its gRPC channel and HTTP connection pool are reused."""
    return _client(settings.PLATFORM["TF_SERVING_GRPC"], settings.PLATFORM["TF_SERVING_REST"])


@lru_cache(maxsize=4)
def _client(grpc_target: str, rest_url: str) -> ModelServerClient:
    return ModelServerClient(grpc_target=grpc_target, rest_url=rest_url)


def model_config_write(*, entries: list[ModelEntry], path: Path) -> None:
    """Keep the config file equal to what the server was told, so a restart serves the same."""
    text = text_format.MessageToString(model_server_config(entries))
    staging = path.with_suffix(".tmp")
    staging.write_text(text or "model_config_list {\n}\n")
    staging.replace(path)


def model_server_predict(
    *, name: str, version: int | None, label: str | None, body: bytes
) -> tuple[int, bytes]:
    """POSTs TF Serving JSON to the model server's :predict; (HTTP status, body) as answered.

    Every request of the platform's inference API passes here, so it skips `requests` (whose
    per-call session, adapter and pool bookkeeping shows in bench/inference.py's platform REST
    latency) for one kept-alive http.client connection per web thread.
    """
    base = urlsplit(settings.PLATFORM["TF_SERVING_REST"])
    path = f"{base.path.rstrip('/')}/v1/models/{quote(name, safe='')}"
    if version is not None:
        path += f"/versions/{int(version)}"
    elif label is not None:
        path += f"/labels/{quote(label, safe='')}"
    headers = {"Content-Type": "application/json"}
    key = (base.hostname or "127.0.0.1", base.port or 80)
    for attempt in (1, 2):
        try:
            connection = _connection(host=key[0], port=key[1])
            connection.request("POST", f"{path}:predict", body=body, headers=headers)
            answer = connection.getresponse()
            return answer.status, answer.read()
        except (OSError, http.client.HTTPException) as error:
            stale = _thread_connections().pop(key, None)
            if stale is not None:
                stale.close()
            # A kept-alive connection the server closed meanwhile fails at once; predict has
            # no side effects, so one retry on a fresh connection is safe.
            if attempt == 2 or isinstance(error, TimeoutError):
                raise ModelServerError(code="UNAVAILABLE", message=str(error)) from error
    raise AssertionError("unreachable")


def _thread_connections() -> dict[tuple[str, int], http.client.HTTPConnection]:
    if not hasattr(_connections, "open"):
        _connections.open = {}
    return _connections.open


def _connection(*, host: str, port: int) -> http.client.HTTPConnection:
    found = _thread_connections().get((host, port))
    if found is None:
        found = http.client.HTTPConnection(host, port, timeout=PREDICT_TIMEOUT_SECONDS)
        found.connect()
        # Headers and body leave in one send(), but a kept-alive socket must not hold the
        # next request back waiting for an ACK.
        found.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _thread_connections()[(host, port)] = found
    return found
