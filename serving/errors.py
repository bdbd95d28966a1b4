"""TF Serving's status codes and how they surface on gRPC and HTTP.

The HTTP mapping is the one in tensorflow_serving/model_servers/http_server.cc, so a client
sees the same status code from the embedded server and from a real tensorflow/serving container.
"""

from __future__ import annotations

import enum

import grpc


class Code(enum.IntEnum):
    """tensorflow.error.Code; the numbers are gRPC's, which is why TF reuses them."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


HTTP_STATUS: dict[Code, int] = {
    Code.OK: 200,
    Code.CANCELLED: 499,
    Code.UNKNOWN: 500,
    Code.INVALID_ARGUMENT: 400,
    Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.PERMISSION_DENIED: 403,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.FAILED_PRECONDITION: 400,
    Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400,
    Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
    Code.UNAUTHENTICATED: 401,
}

_GRPC_BY_VALUE = {status.value[0]: status for status in grpc.StatusCode}


class ServingError(Exception):
    """A non-OK absl::Status: the code decides the HTTP/gRPC status, the message is the body."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        # absl::Status::ToString(), which TF Serving embeds in nested error messages.
        return f"{self.code.name}: {self.message}"

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)

    @property
    def grpc_code(self) -> grpc.StatusCode:
        return _GRPC_BY_VALUE[int(self.code)]


def invalid_argument(message: str) -> ServingError:
    return ServingError(Code.INVALID_ARGUMENT, message)


def code_from_int(value: int) -> Code:
    try:
        return Code(value)
    except ValueError:
        return Code.UNKNOWN
