"""The one error base class of the platform.

Services raise these; `tfplatform.core.api.exception_handler` is the single place that turns
them into HTTP responses, so no view decides status codes for business errors.
"""


class PlatformError(Exception):
    status_code = 400
    default_message = "The request could not be processed."

    def __init__(self, message: str | None = None, *, field: str | None = None) -> None:
        self.message = message or self.default_message
        self.field = field
        super().__init__(self.message)


class InvalidInput(PlatformError):
    status_code = 400
    default_message = "Invalid input."


class NotFound(PlatformError):
    status_code = 404
    default_message = "Not found."


class Forbidden(PlatformError):
    status_code = 403
    default_message = "You do not have permission to do this."


class Conflict(PlatformError):
    status_code = 409
    default_message = "The request conflicts with the object's current state."


class InvalidTransition(Conflict):
    default_message = "That state change is not allowed."


class PayloadTooLarge(PlatformError):
    status_code = 413
    default_message = "The request body is too large."


class TooManyRequests(PlatformError):
    status_code = 429


class Unavailable(PlatformError):
    status_code = 503
    default_message = "The service is temporarily unavailable."
