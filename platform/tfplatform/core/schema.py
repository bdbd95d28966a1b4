"""The OpenAPI schema says what the one error handler (core/api.py) answers, not only success.

Every error is `{"error": "<one sentence>"}`, with field errors beside it on a 400. Which
statuses an operation can answer follows from its shape, so the schema stays honest without a
decorator on every view: the API fuzzer (tests/tfplatform/core/test_api_fuzz.py) fails on any
status an operation answers that its schema does not list.
"""

from typing import Any

ERROR_COMPONENT = "Error"
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An error; on a 400, each field's messages beside `error`.",
    "properties": {
        "error": {"type": "string", "description": "One sentence to show a person."},
        "code": {"type": "string", "description": "Stable: what a client may branch on."},
    },
    "required": ["error"],
    "additionalProperties": True,
}
ALWAYS = {
    "401": "Not signed in, or the token is unknown.",
    "403": "Signed in, but not allowed to do this.",
    "429": "Too many requests (throttled, or signed out after failed sign-ins).",
}
WRITE_METHODS = ("post", "put", "patch", "delete")
# Operations that reach the model server, which may be loading or down.
MODEL_SERVER_PATHS = ("/models/", "/deploy/")


def _statuses(*, path: str, method: str, operation: dict[str, Any]) -> dict[str, str]:
    statuses = dict(ALWAYS)
    if operation.get("parameters") or operation.get("requestBody"):
        statuses["400"] = "Invalid input; field errors name what to fix."
    if "{" in path:
        statuses["404"] = "Not found, or not visible to you."
    if method in WRITE_METHODS:
        statuses["409"] = "Not possible in the object's current state."
    if operation.get("requestBody"):
        statuses["413"] = "The request body is over the platform's limits."
    if any(part in path for part in MODEL_SERVER_PATHS):
        statuses["503"] = "The model server is not reachable or not ready."
    return statuses


def schema_errors_document(result: dict[str, Any], generator: Any, request: Any,
                           public: bool) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: each operation's error answers."""
    result.setdefault("components", {}).setdefault("schemas", {})[ERROR_COMPONENT] = ERROR_SCHEMA
    reference = {"$ref": f"#/components/schemas/{ERROR_COMPONENT}"}
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for status, description in _statuses(path=path, method=method,
                                                 operation=operation).items():
                operation["responses"].setdefault(status, {
                    "description": description,
                    "content": {"application/json": {"schema": reference}},
                })
    return result
