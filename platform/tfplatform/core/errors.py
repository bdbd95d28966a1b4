"""The one error base class of the platform.

Services raise these; `tfplatform.core.api.exception_handler` is the single place that turns
them into API answers (`{"error", "code"}`), and `tfplatform.core.pages` into pages (the 404
page, or a message and a redirect back), so no view decides what a business error looks like.
Each class's `code` is stable: clients may branch on it, never on the message.
"""


class PlatformError(Exception):
    status_code = 400
    code = "error"
    default_message = "The request could not be processed."

    def __init__(self, message: str | None = None, *, field: str | None = None) -> None:
        self.message = message or self.default_message
        self.field = field
        super().__init__(self.message)


class InvalidInput(PlatformError):
    code = "invalid_input"
    status_code = 400
    default_message = "Invalid input."


class NotFound(PlatformError):
    code = "not_found"
    status_code = 404
    default_message = "Not found."


class Forbidden(PlatformError):
    code = "forbidden"
    status_code = 403
    default_message = "You do not have permission to do this."


class Conflict(PlatformError):
    code = "conflict"
    status_code = 409
    default_message = "The request conflicts with the object's current state."


class InvalidTransition(Conflict):
    code = "invalid_transition"
    default_message = "That state change is not allowed."


class PayloadTooLarge(PlatformError):
    code = "too_large"
    status_code = 413
    default_message = "The request body is too large."


class TooManyRequests(PlatformError):
    code = "too_many_requests"
    status_code = 429


class LimitReached(TooManyRequests):
    """A per-user limit on what may wait or run at once; ending something makes room."""

    code = "limit_reached"
    default_message = "You have reached a limit on what you may queue or run at once."


class Unavailable(PlatformError):
    """A dependency (the model server, say) is away; clients should retry after a while."""

    code = "unavailable"
    status_code = 503
    default_message = "The service is temporarily unavailable."
    retry_after_seconds = 5


class InsufficientStorage(Unavailable):
    """The server's own disk is full: nothing the client sent is at fault, nothing was kept."""

    code = "insufficient_storage"
    status_code = 507
    default_message = (
        "The server is out of disk space; nothing was saved. Try again once an operator has "
        "freed space."
    )
    retry_after_seconds = 60


class StorageQuotaExceeded(PayloadTooLarge):
    code = "storage_quota_exceeded"
