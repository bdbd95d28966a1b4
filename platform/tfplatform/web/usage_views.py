"""GPU-hour showback pages: the staff report with its chart, and every user's own usage."""

from dataclasses import replace
from datetime import timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.views.decorators.http import require_GET
from rest_framework import serializers

from tfplatform.core.errors import InvalidInput
from tfplatform.experiments.usage.api import usage_query_parse
from tfplatform.experiments.usage.report import usage_report
from tfplatform.experiments.usage.rows import UsageQuery, UsageRow, usage_totals
from tfplatform.web.cluster_views import staff_only

# The table's groupings offered on the staff page (any comma list works in the URL and API).
GROUPINGS = ["user", "team", "experiment", "day", "team,day", "user,day", "user,experiment"]


def _filled(given: QueryDict) -> QueryDict:
    """The page's form sends its empty fields too: empty means "not filtered" there."""
    params = given.copy()
    for name in list(params):
        if not params.get(name):
            del params[name]
    return params


def _query(params: QueryDict) -> UsageQuery:
    try:
        return usage_query_parse(params)
    except serializers.ValidationError as error:
        detail = error.detail if isinstance(error.detail, dict) else {"query": error.detail}
        name, problems = next(iter(detail.items()))
        raise InvalidInput(f"{name}: {' '.join(str(p) for p in problems)}") from None


def _days_series(*, query: UsageQuery, rows: list[UsageRow]) -> dict[str, list[Any]]:
    """One point per UTC day of the query, zero on days nothing ran, as the chart draws them."""
    by_day = {row.day: row for row in rows}
    days = [query.start + timedelta(days=n) for n in range((query.end - query.start).days + 1)]
    empty = UsageRow()
    return {
        "days": [day.isoformat() for day in days],
        "gpu_hours": [round(by_day.get(day, empty).gpu_hours, 3) for day in days],
        "cpu_slot_hours": [round(by_day.get(day, empty).cpu_slot_hours, 3) for day in days],
    }


def _context(request: HttpRequest, *, query: UsageQuery) -> dict[str, Any]:
    rows = usage_report(viewer=request.user, query=query)
    daily = usage_report(viewer=request.user, query=replace(query, group_by=("day",)))
    return {
        "query": query,
        "groups": query.group_by,
        "rows": rows,
        "total": usage_totals(rows=rows),
        "series": _days_series(query=query, rows=daily),
    }


@staff_only
@require_GET
def usage_staff_page(request: HttpRequest) -> HttpResponse:
    params = _filled(request.GET)
    query = _query(params)
    context = _context(request, query=query) | {
        "groupings": GROUPINGS,
        "group_by": ",".join(query.group_by),
        "csv_query": params.urlencode(),
    }
    return render(request, "usage/staff.html", context)


@login_required
@require_GET
def usage_mine_page(request: HttpRequest) -> HttpResponse:
    """Your own usage, every user: by experiment, with the daily chart."""
    params = _filled(request.GET)
    params["user"] = request.user.get_username()
    params["group_by"] = "experiment"
    params.pop("team", None)
    query = _query(params)
    context = _context(request, query=query) | {
        "csv_query": params.urlencode(),
    }
    return render(request, "usage/mine.html", context)
