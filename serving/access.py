"""Who may call the model server: holders of its access token, when it has one.

TF Serving itself answers anyone who reaches its ports; real deployments keep it on a network
only the web app reaches. The embedded server runs on a host shared with other users and with
trial sandboxes, so the platform starts it with a token (from a file named in the environment,
never argv, which every local user can read, nor the environment itself, which its models could
read) and its one client sends it on every call: as gRPC metadata
and as an HTTP header, both `authorization: Bearer <token>`, which TF Serving ignores.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import grpc

TOKEN_ENV = "TF_SERVING_ACCESS_TOKEN"  # noqa: S105 - the variable's name, not a token
# Or a file (0600) that holds it: read once at start, before the server confines itself, so a
# model it serves cannot read it back, as it could its process's environment.
TOKEN_FILE_ENV = "TF_SERVING_ACCESS_TOKEN_FILE"  # noqa: S105 - the variable's name
HEADER = "authorization"
DENIED = "The model server needs its access token (authorization: Bearer <token>)."


def access_token_derive(*, secret: str) -> str:
    """A token from a secret the platform keeps anyway (its secret key), so its processes agree
    on it with nothing more stored."""
    return hmac.new(secret.encode(), b"tfplatform.serving.access", hashlib.sha256).hexdigest()


def access_token_from_env() -> str:
    if token := os.environ.get(TOKEN_ENV, ""):
        return token
    path = os.environ.get(TOKEN_FILE_ENV, "")
    if not path:
        return ""
    with open(path, encoding="utf-8") as handle:
        token = handle.read().strip()
    if not token:
        raise ValueError(f"{TOKEN_FILE_ENV} names an empty file: {path}")
    return token


def access_token_file_write(*, path: str, token: str) -> None:
    """Writes `token` to `path`, readable by its owner only from the first byte on."""
    staging = f"{path}.{os.getpid()}.tmp"
    descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(token)
    os.replace(staging, path)


def access_header(*, token: str) -> dict[str, str]:
    return {HEADER: f"Bearer {token}"} if token else {}


def access_allowed(*, token: str, presented: str | None) -> bool:
    if not token:
        return True
    return hmac.compare_digest((presented or "").encode(), f"Bearer {token}".encode())


def grpc_refusal(code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    """A handler that ends the call with `code` before anything of the server's runs."""

    def refuse(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, message)

    return grpc.unary_unary_rpc_method_handler(refuse)


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses every RPC (reload included) without the token, before any handler runs."""

    def __init__(self, *, token: str) -> None:
        self._token = token
        self._deny = grpc_refusal(grpc.StatusCode.UNAUTHENTICATED, DENIED)

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: Any) -> Any:
        metadata = dict(handler_call_details.invocation_metadata or ())
        if access_allowed(token=self._token, presented=metadata.get(HEADER)):
            return continuation(handler_call_details)
        return self._deny


class _Details(
    namedtuple("_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                            "compression")),
    grpc.ClientCallDetails,
):
    pass


class _ClientToken(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, *, token: str) -> None:
        self._metadata = ((HEADER, f"Bearer {token}"),)

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any,
                              request: Any) -> Any:
        return continuation(_Details(
            details.method, details.timeout, (*(details.metadata or ()), *self._metadata),
            details.credentials, details.wait_for_ready, details.compression,
        ), request)


def channel_with_token(*, channel: grpc.Channel, token: str) -> grpc.Channel:
    if not token:
        return channel
    return grpc.intercept_channel(channel, _ClientToken(token=token))
