"""Human-readable output: the experiment table, one experiment's status, metric summaries."""

from datetime import datetime
from typing import Any

NAME_WIDTH = 32


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    )


def experiments_table(experiments: list[dict[str, Any]]) -> str:
    rows = [
        [
            str(e["id"]),
            _clip(str(e["name"])),
            str(e["state"]),
            _clip(str(e["model"])),
            _clip(str(e["dataset"])),
            str(e.get("strategy") or "-"),
            str(e["owner"]),
            when(e.get("created_at")),
            _clip(",".join(e.get("tags") or [])) or "-",
        ]
        for e in experiments
    ]
    headers = ["ID", "NAME", "STATE", "MODEL", "DATASET", "STRATEGY", "OWNER", "CREATED", "TAGS"]
    return table(headers, rows)


def artifacts_table(artifacts: list[dict[str, Any]]) -> str:
    rows = [[str(a["name"]), size(int(a["size_bytes"])), str(a["files"]), str(a["description"])]
            for a in artifacts]
    return table(["NAME", "SIZE", "FILES", "CONTENTS"], rows)


def datasets_table(datasets: list[dict[str, Any]]) -> str:
    rows = [[str(d["name"]), str(d["version"]), str(d["format"]), str(d["train_examples"]),
             str(d["validation_examples"]), str(d["num_classes"] or "-"),
             size(int(d["size_bytes"])), str(d["owner"]), str(d["train"])] for d in datasets]
    return table(["NAME", "VERSION", "FORMAT", "TRAIN", "VALIDATION", "CLASSES", "SIZE", "OWNER",
                  "URI"], rows)


def size(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    value = count / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def metrics_latest(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """The newest value of each metric of the latest trial that reported any, and its epoch."""
    if not metrics:
        return {}
    trial = max(int(m["trial"]) for m in metrics)
    values: dict[str, float] = {}
    epoch = None
    for metric in metrics:  # the API lists them oldest first
        if int(metric["trial"]) == trial:
            values[str(metric["name"])] = float(metric["value"])
            if metric.get("epoch") is not None:
                epoch = max(int(metric["epoch"]), epoch or 0)
    return {"trial": trial, "epoch": epoch, "values": dict(sorted(values.items()))}


def gpus_each(resources: dict[str, Any]) -> str:
    """What each worker holds of GPUs: whole ones, or a share of one."""
    if resources.get("gpu_fraction"):
        return f"{resources['gpu_fraction']:g} of one GPU"
    if resources.get("gpu_memory_mb"):
        return f"{resources['gpu_memory_mb']} MB of one GPU"
    return f"{resources.get('gpus_per_worker', 0)} GPU(s)"


def _elastic_text(*, resources: dict[str, Any], size: dict[str, int] | None) -> str:
    """An elastic experiment's range and the size it runs at now: "2 GPU(s) now, of 1 to 4"."""
    if resources.get("min_workers"):
        low, high, key, unit = resources["min_workers"], resources.get("workers", 1), \
            "workers", "worker(s)"
    elif resources.get("min_gpus_per_worker"):
        low, high, key, unit = resources["min_gpus_per_worker"], \
            resources.get("gpus_per_worker", 0), "gpus_per_worker", "GPU(s) per worker"
    else:
        return ""
    now = f"{size[key]} {unit} now, " if size else ""
    return f"{now}elastic from {low} to {high}"


def experiment_status(experiment: dict[str, Any], latest: dict[str, Any]) -> str:
    resources = experiment.get("resources") or {}
    lines = [
        ("experiment", f"{experiment['id']}  {experiment['name']}"),
        ("state", str(experiment["state"])),
        ("owner", str(experiment["owner"])),
        ("model", str(experiment["model"])),
        ("dataset", str(experiment["dataset"])),
        (
            "resources",
            f"{resources.get('workers', 1)} worker(s), {gpus_each(resources)} each, "
            f"{resources.get('parameter_servers', 0)} parameter server(s)"
            + "".join(f", {label} {resources[key]}" for key, label in (
                ("pool", "pool"), ("gpu_type", "GPU type")) if resources.get(key)),
        ),
    ]
    elastic = _elastic_text(resources=resources, size=experiment.get("size"))
    if elastic:
        lines.append(("size", elastic))
    if experiment.get("strategy"):
        reason = experiment.get("strategy_reason")
        lines.append(("strategy", f"{experiment['strategy']}" + (f" ({reason})" if reason else "")))
    if experiment.get("pending_reason") and experiment["state"] in ("queued", "scheduled"):
        lines.append(("pending", str(experiment["pending_reason"])))
    if experiment.get("error"):
        lines.append(("error", str(experiment["error"]).strip()))
    trials = experiment.get("trials") or []
    if trials:
        newest = max(trials, key=lambda t: int(t["restart_count"]))
        lines.append(("trials", f"{len(trials)} (latest {newest['state']})"))
    for label, key in (
        ("created", "created_at"),
        ("started", "started_at"),
        ("finished", "finished_at"),
    ):
        if experiment.get(key):
            lines.append((label, when(experiment[key])))
    if latest:
        values = ", ".join(f"{name} {value:.4g}" for name, value in latest["values"].items())
        epoch = f"epoch {latest['epoch']}: " if latest.get("epoch") is not None else ""
        lines.append(("metrics", epoch + values))
    width = max(len(label) for label, _ in lines)
    indent = "\n" + " " * (width + 2)
    return "\n".join(
        f"{label.ljust(width)}  {value.replace(chr(10), indent)}" for label, value in lines
    )


def when(value: Any) -> str:
    """An API timestamp in this machine's time zone, to the second."""
    if not value:
        return "-"
    try:
        return datetime.fromisoformat(str(value)).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return str(value)


def _clip(text: str) -> str:
    return text if len(text) <= NAME_WIDTH else text[: NAME_WIDTH - 1] + "…"
