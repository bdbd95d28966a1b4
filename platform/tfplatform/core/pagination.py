"""Every list's pagination: limit/offset, with a limit no request can push past what a page
is for (an unbounded one reached the database as an out-of-range LIMIT: a 500), and values that
are not whole numbers refused rather than silently replaced by the defaults."""

from typing import Any

from rest_framework import pagination
from rest_framework.request import Request

from tfplatform.core.errors import InvalidInput

MAX_LIMIT = 500
MAX_OFFSET = 2**62  # PostgreSQL's OFFSET is a bigint


class LimitOffsetPagination(pagination.LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def paginate_queryset(self, queryset: Any, request: Request,
                          view: Any = None) -> list[Any] | None:
        for name, low, high in ((self.limit_query_param, 1, None),
                                (self.offset_query_param, 0, MAX_OFFSET)):
            _query_integer_check(request=request, name=name, low=low, high=high)
        return super().paginate_queryset(queryset, request, view)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        # The schema says what validation does: larger limits are cut to MAX_LIMIT.
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["description"] = (
                    f"Number of results to return per page (at most {MAX_LIMIT}; "
                    f"more is cut to {MAX_LIMIT})."
                )
                parameter["schema"]["minimum"] = 1
            if parameter["name"] == self.offset_query_param:
                parameter["schema"].update(minimum=0, maximum=MAX_OFFSET)
        return parameters


def _query_integer_check(*, request: Request, name: str, low: int, high: int | None) -> None:
    values = request.query_params.getlist(name)
    if not values:
        return
    if len(values) > 1:
        raise InvalidInput(f"Send `{name}` once.", field=name)
    value = values[0].strip()
    if (not value.isascii() or not value.isdigit() or int(value) < low
            or (high is not None and int(value) > high)):
        bound = f" up to {high}" if high is not None else ""
        raise InvalidInput(f"`{name}` must be a whole number from {low}{bound}.", field=name)
