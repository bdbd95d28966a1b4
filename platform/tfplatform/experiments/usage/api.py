"""GPU-hour showback over the REST API: `/api/v1/usage/` (JSON) and `/api/v1/usage.csv`."""

import io
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tfplatform.core.csv_export import csv_write_rows
from tfplatform.experiments.usage.report import usage_report
from tfplatform.experiments.usage.rows import (
    GROUPS,
    UsageQuery,
    UsageRow,
    usage_query,
    usage_totals,
)

NOT_VISIBLE = OpenApiResponse(
    description="The user, team or experiment filtered on does not exist or is not visible "
                "to you (someone else's, outside your team).")


class UsageQuerySerializer(serializers.Serializer):
    # Blank is "no filter", as an empty field of the page's form sends it.
    user = serializers.CharField(required=False, allow_blank=True, max_length=150,
                                 help_text="Owner's username")
    team = serializers.CharField(required=False, allow_blank=True, max_length=200,
                                 help_text="Team name")
    experiment = serializers.IntegerField(required=False, min_value=1, max_value=2**62)
    group_by = serializers.CharField(
        required=False, allow_blank=True, default="user", max_length=60,
        help_text=f"Comma-separated, any of: {', '.join(GROUPS)} (days are UTC).")

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        # `from` and `to` are Python keywords: declared here, not as attributes.
        fields["from"] = serializers.DateField(
            required=False, help_text="First UTC day, YYYY-MM-DD (default: 29 days before 'to')")
        fields["to"] = serializers.DateField(
            required=False, help_text="Last UTC day, inclusive (default: today)")
        return fields


    def to_internal_value(self, data: Any) -> Any:
        # DRF takes a blank query value for an absent one; a blank date or number is no date
        # or number (the schema says so), so it is refused rather than silently defaulted.
        blank = {name: ["This field may not be blank."] for name in ("from", "to", "experiment")
                 if name in data and data.get(name) == ""}
        if blank:
            raise serializers.ValidationError(blank)
        return super().to_internal_value(data)


def usage_query_parse(params: Any) -> UsageQuery:
    """The query string as a checked UsageQuery; bad input raises 400 with field errors."""
    serializer = UsageQuerySerializer(data=params)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    return usage_query(
        start=data.get("from"), end=data.get("to"),
        group_by=[part.strip() for part in data["group_by"].split(",") if part.strip()] or ["user"],
        user=data.get("user"), team=data.get("team"), experiment_id=data.get("experiment"),
    )


def usage_row_data(row: UsageRow, *, groups: tuple[str, ...]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if "user" in groups:
        data["user"] = row.user
    if "team" in groups:
        data["team"] = row.team
    if "experiment" in groups:
        data["experiment"] = row.experiment_id
        data["experiment_name"] = row.experiment
    if "day" in groups:
        data["day"] = row.day.isoformat() if row.day else None
    return data | {
        "gpu_hours": round(row.gpu_hours, 6),
        "cpu_slot_hours": round(row.cpu_slot_hours, 6),
        "gpu_seconds": round(row.gpu_seconds, 3),
        "cpu_slot_seconds": round(row.cpu_slot_seconds, 3),
        # Null, never 0, when no GPU time was measured (emulated devices, no NVML).
        "gpu_utilization_percent": (None if row.gpu_utilization is None
                                    else round(row.gpu_utilization, 2)),
        "measured_gpu_hours": round(row.measured_gpu_seconds / 3600, 6),
        "allocations": row.allocations,
        "running": row.running,
    }


def usage_data(*, query: UsageQuery, rows: list[UsageRow]) -> dict[str, Any]:
    total = usage_row_data(usage_totals(rows=rows), groups=())
    return {
        "from": query.start.isoformat(),
        "to": query.end.isoformat(),
        "timezone": "UTC",
        "group_by": list(query.group_by),
        "totals": total,
        "results": [usage_row_data(row, groups=query.group_by) for row in rows],
    }


def usage_csv(*, query: UsageQuery, rows: list[UsageRow]) -> str:
    out = io.StringIO()
    results = [usage_row_data(row, groups=query.group_by) for row in rows]
    header = list(usage_row_data(UsageRow(), groups=query.group_by))
    # Usernames, team and experiment names are user input.
    csv_write_rows(out=out, rows=[header, *([result[name] for name in header]
                                            for result in results)])
    return out.getvalue()


class UsageApi(APIView):
    @extend_schema(parameters=[UsageQuerySerializer],
                   responses={200: OpenApiTypes.OBJECT, 404: NOT_VISIBLE})
    def get(self, request: Request) -> Response:
        """GPU-hours and CPU-slot-hours (devices × seconds held, from allocation records; running
        ones count up to now) per user, team, experiment and/or UTC day, with the mean measured
        GPU utilization where NVML measured it. Yours and your team's; staff: everyone's."""
        query = usage_query_parse(request.query_params)
        rows = usage_report(viewer=request.user, query=query)
        return Response(usage_data(query=query, rows=rows))


class UsageCsvApi(APIView):
    @extend_schema(parameters=[UsageQuerySerializer],
                   responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR),
                              404: NOT_VISIBLE})
    def get(self, request: Request) -> HttpResponse:
        """The same report as CSV, one row per group."""
        query = usage_query_parse(request.query_params)
        rows = usage_report(viewer=request.user, query=query)
        name = f"usage-{query.start.isoformat()}-{query.end.isoformat()}.csv"
        return HttpResponse(usage_csv(query=query, rows=rows),
                            content_type="text/csv; charset=utf-8",
                            headers={"Content-Disposition": f'attachment; filename="{name}"'})
