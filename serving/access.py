"""Who may call the model server: holders of its access token, when it has one.

TF Serving itself answers anyone who reaches its ports; real deployments keep it on a network
only the web app reaches. The embedded server runs on a host shared with other users and with
trial sandboxes, so the platform starts it with a token (from the environment, never argv,
which every local user can read) and its one client sends it on every call: as gRPC metadata
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
HEADER = "authorization"
DENIED = "The model server needs its access token (authorization: Bearer <token>)."


def access_token_derive(*, secret: str) -> str:
    """A token from a secret the platform keeps anyway (its secret key), so its processes agree
    on it with nothing more stored."""
    return hmac.new(secret.encode(), b"tfplatform.serving.access", hashlib.sha256).hexdigest()


def access_token_from_env() -> str:
    return os.environ.get(TOKEN_ENV, "")


def access_header(*, token: str) -> dict[str, str]:
    return {HEADER: f"Bearer {token}"} if token else {}


def access_allowed(*, token: str, presented: str | None) -> bool:
    if not token:
        return True
    return hmac.compare_digest((presented or "").encode(), f"Bearer {token}".encode())


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses every RPC (reload included) without the token, before any handler runs."""

    def __init__(self, *, token: str) -> None:
        self._token = token

        def deny(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, DENIED)

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

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
