"""Every list's pagination: limit/offset, with a limit no request can push past what a page
is for (an unbounded one reached the database as an out-of-range LIMIT: a 500)."""

from typing import Any

from rest_framework import pagination

MAX_LIMIT = 500


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        # The schema says what validation does: larger limits are cut to MAX_LIMIT.
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["description"] = (
                    f"Number of results to return per page (at most {MAX_LIMIT}; "
                    f"more is cut to {MAX_LIMIT})."
                )
        return parameters
