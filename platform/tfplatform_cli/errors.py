"""The one error class of the client (`main` prints it and exits), and the API's errors as text."""

from collections.abc import Mapping
from typing import Any

EXIT_API_ERROR = 1
EXIT_USAGE = 2


class CliError(Exception):
    def __init__(self, message: str, *, exit_code: int = EXIT_API_ERROR) -> None:
        self.message = message
        self.exit_code = exit_code
        super().__init__(message)


def error_describe(body: Any) -> str:
    """One readable message from {"error": ..., "code": ..., "<field>": [...]}, the API's
    error shape; the code is for programs, so it is not shown."""
    if not isinstance(body, dict):
        return ""
    error = str(body.get("error") or body.get("detail") or "")
    fields = {k: v for k, v in body.items() if k not in ("error", "detail", "code")}
    general = [str(m) for m in _messages(fields.pop("non_field_errors", []))]
    if general and error in ("", "Invalid input."):
        error, general = "; ".join(general), []
    lines = [f"{name}: {message}" for name, message in _field_messages(fields)]
    if len(lines) == 1 and lines[0].endswith(f": {error}"):
        return lines[0]  # a service error naming its field: say it once
    return "\n  ".join([error or "the server refused the request", *general, *lines])


def _field_messages(fields: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    found = []
    for name, value in fields.items():
        if isinstance(value, Mapping):
            found.extend(_field_messages(value, prefix=f"{prefix}{name}."))
        else:
            found.extend((f"{prefix}{name}", str(m)) for m in _messages(value))
    return found


def _messages(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]
