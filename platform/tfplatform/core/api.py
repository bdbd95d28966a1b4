"""HTTP translation of errors: the one handler for the API, plus JSON 404/500 for /api/."""

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from tfplatform.core.errors import PlatformError, Unavailable


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, PlatformError):
        body: dict[str, Any] = {"error": exc.message, "code": exc.code}
        if exc.field:
            body[exc.field] = [exc.message]
        headers = {}
        if isinstance(exc, Unavailable):
            headers["Retry-After"] = str(exc.retry_after_seconds)
        return Response(body, status=exc.status_code, headers=headers)
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(
            detail=exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        )
    if isinstance(exc, RequestDataTooBig):  # a body over the limits, cut off while read
        return Response({"error": str(exc) or "The request is too large.", "code": "too_large"},
                        status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, Http404):
        return Response({"error": "Not found.", "code": "not_found"},
                        status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    code = exc.default_code if isinstance(exc, exceptions.APIException) else "error"
    if isinstance(data, dict) and set(data) == {"detail"}:
        response.data = {"error": str(data["detail"]), "code": code}
    elif isinstance(exc, exceptions.ValidationError):
        # Field errors stay as DRF shapes them; "error" gives clients one sentence to show.
        fields = data if isinstance(data, dict) else {"non_field_errors": data}
        response.data = {"error": "Invalid input.", "code": "invalid_input", **fields}
    return response
