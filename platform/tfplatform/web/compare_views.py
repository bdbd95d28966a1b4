"""Side-by-side comparison of experiments: the CPU vs GPU vs distributed table, and its CSV."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from tfplatform.core.csv_export import csv_write_rows
from tfplatform.core.errors import InvalidInput
from tfplatform.experiments.selectors.comparison import experiments_compare
from tfplatform.experiments.selectors.experiments import experiment_list

MAX_COMPARED = 20
CSV_COLUMNS = [
    "id",
    "name",
    "state",
    "configuration",
    "strategy",
    "workers",
    "gpus_per_worker",
    "parameter_servers",
    "batch_size",
    "global_batch_size",
    "images_per_sec_median",
    "speedup",
    "target_metric",
    "target_value",
    "time_to_target_seconds",
    "accuracy",
    "val_accuracy",
    "duration_seconds",
]


class BadIds(InvalidInput):
    code = "bad_ids"


def compare_ids(request: HttpRequest) -> list[int]:
    """`?ids=1,2,3` or repeated `?ids=` (the list page's checkboxes), in order, no repeats."""
    parts = [part.strip() for value in request.GET.getlist("ids") for part in value.split(",")]
    parts = [part for part in parts if part]
    if not all(part.isascii() and part.isdigit() and len(part) <= 12 for part in parts):
        raise BadIds("ids must be experiment numbers separated by commas, e.g. ids=3,7,12.")
    ids = list(dict.fromkeys(int(part) for part in parts))
    if len(ids) > MAX_COMPARED:
        raise BadIds(f"Compare at most {MAX_COMPARED} experiments at once.")
    return ids


def compare_ids_named(request: HttpRequest, *, what: str) -> list[int]:
    """`compare_ids`, at least one."""
    ids = compare_ids(request)
    if not ids:
        raise BadIds(f"Name the experiments to {what}: ids=3,7,12.")
    return ids


@login_required
@require_GET
def compare_page(request: HttpRequest) -> HttpResponse:
    try:
        ids = compare_ids(request)
    except BadIds as error:
        return render(request, "experiments/compare.html", {"error": str(error)}, status=400)
    comparison = experiments_compare(user=request.user, ids=ids)
    context: dict[str, Any] = {
        "ids": ids,
        "comparison": comparison,
        "csv_ids": ",".join(str(row.experiment.pk) for row in comparison.rows),
        "chart": {
            "labels": [f"#{row.experiment.pk} {row.configuration}" for row in comparison.rows],
            "images_per_sec": [row.images_per_sec for row in comparison.rows],
        },
        "recent": [] if ids else experiment_list(user=request.user)[:30],
    }
    return render(request, "experiments/compare.html", context)


@login_required
@require_GET
def compare_csv(request: HttpRequest) -> HttpResponse:
    ids = compare_ids_named(request, what="compare")
    comparison = experiments_compare(user=request.user, ids=ids)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="experiments-compare.csv"'
    rows = (
        [
            row.experiment.pk,
            row.experiment.name,
            row.experiment.state,
            row.configuration,
            row.experiment.strategy,
            row.experiment.workers,
            row.experiment.gpus_per_worker,
            row.experiment.parameter_servers,
            _number(row.batch_size),
            _number(row.global_batch_size),
            _number(row.images_per_sec),
            _number(row.speedup),
            row.experiment.target_metric,
            _number(row.experiment.target_value),
            _number(row.time_to_target_seconds),
            _number(row.accuracy),
            _number(row.val_accuracy),
            _number(row.duration_seconds),
        ]
        for row in comparison.rows
    )
    csv_write_rows(out=response, rows=[CSV_COLUMNS, *rows])
    return response


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return str(value) if isinstance(value, int) else f"{value:.4f}".rstrip("0").rstrip(".")
