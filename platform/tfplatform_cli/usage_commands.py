"""`tfp usage`: GPU-hour showback, the web's usage report in a terminal."""

import argparse
import json
import sys
from typing import Any

from tfplatform_cli.commands import client_for
from tfplatform_cli.render import NAME_WIDTH, table

# The API's query parameters and the attributes of `args` holding them.
QUERY = {"group_by": "group_by", "from": "start", "to": "end", "user": "user", "team": "team",
         "experiment": "experiment"}
# Group columns in the order the API's rows and the web page show them, whatever group_by's.
GROUP_COLUMNS = (("user", "USER"), ("team", "TEAM"), ("experiment", "EXPERIMENT"),
                 ("experiment_name", "NAME"), ("day", "DAY"))
GROUP_OF = {"experiment_name": "experiment"}


def usage(args: argparse.Namespace) -> int:
    # Only what was given: the server owns the defaults (by user, the last 30 days) and checks
    # every value, so a bad date or grouping gets its field error, as on the web page.
    query = {name: str(getattr(args, attribute)) for name, attribute in QUERY.items()
             if getattr(args, attribute) is not None}
    client = client_for(args)
    if args.csv:
        sys.stdout.flush()
        sys.stdout.buffer.write(client.usage_csv(query=query))
        sys.stdout.buffer.flush()
        return 0
    report = client.usage(query=query)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print(usage_table(report))
    return 0


def usage_table(report: dict[str, Any]) -> str:
    """A row per group, then the totals and the days counted."""
    days = f"{report['from']} to {report['to']} ({report.get('timezone', 'UTC')} days)"
    results = report["results"]
    if not results:
        return f"No device was held from {days}."
    groups = set(report["group_by"])
    columns = [(key, title) for key, title in GROUP_COLUMNS if GROUP_OF.get(key, key) in groups]
    headers = [title for _, title in columns] + [
        "GPU-HOURS", "CPU-SLOT-HOURS", "GPU-UTIL", "ALLOCATIONS", "RUNNING"]
    rows = [[_group_cell(result.get(key)) for key, _ in columns] + _figures(result)
            for result in results]
    total = ["total"] + [""] * (len(columns) - 1) + _figures(report["totals"])
    note = f"{days}; GPU-UTIL: mean measured (NVML) utilization, - where not measured"
    if any(result["running"] for result in results):
        note += "; running: still held, counted up to now"
    return f"{table(headers, [*rows, total])}\n\n{note}"


def _figures(result: dict[str, Any]) -> list[str]:
    utilization = result["gpu_utilization_percent"]
    return [
        f"{result['gpu_hours']:.3f}",
        f"{result['cpu_slot_hours']:.3f}",
        # None is "not measured" (emulated devices, no NVML), which is not 0 %.
        "-" if utilization is None else f"{utilization:.0f}%",
        str(result["allocations"]),
        "running" if result["running"] else "-",
    ]


def _group_cell(value: Any) -> str:
    text = "-" if value is None or value == "" else str(value)
    return text if len(text) <= NAME_WIDTH else text[: NAME_WIDTH - 1] + "…"
