"""Human-readable searches: the list, one search with its trials table, a trial in one line."""

from typing import Any

from tfplatform_cli.render import NAME_WIDTH, table, when

BEST_MARK = "*"


def searches_table(searches: list[dict[str, Any]]) -> str:
    rows = [
        [
            str(s["id"]),
            _clip(str(s["name"])),
            str(s["state"]),
            str(s["searcher"]),
            f"{s['metric']} ({s['mode']})",
            str(s["max_trials"]),
            _clip(str(s["model"])),
            _clip(str(s["dataset"])),
            str(s["owner"]),
            when(s.get("created_at")),
        ]
        for s in searches
    ]
    headers = ["ID", "NAME", "STATE", "SEARCHER", "METRIC", "TRIALS", "MODEL", "DATASET",
               "OWNER", "CREATED"]
    return table(headers, rows)


def search_status(search: dict[str, Any]) -> str:
    """The search's settings and outcome, then its trials table."""
    trials = search.get("trials") or []
    lines = [
        ("search", f"{search['id']}  {search['name']}"),
        ("state", str(search["state"])),
        ("owner", str(search["owner"])),
        ("model", f"{search['model']} on {search['dataset']}"),
        ("searcher", f"{search['searcher']}, {search['metric']} ({search['mode']}), "
                     f"{len(trials)} of {search['max_trials']} trials started, "
                     f"{search['max_concurrent']} at a time"),
        ("epochs", _epochs(search)),
    ]
    if search.get("end_reason"):
        lines.append(("ended", str(search["end_reason"])))
    lines.append(("best", best_trial_text(search)))
    for label, key in (("created", "created_at"), ("finished", "finished_at")):
        if search.get(key):
            lines.append((label, when(search[key])))
    width = max(len(label) for label, _ in lines)
    head = "\n".join(f"{label.ljust(width)}  {value}" for label, value in lines)
    if not trials:
        return head
    return f"{head}\n\n{trials_table(search)}"


def trials_table(search: dict[str, Any]) -> str:
    best = search.get("best_trial")
    rows = [
        [
            str(t["index"]) + (BEST_MARK if t["index"] == best else ""),
            str(t["experiment"]),
            params_text(t["params"]),
            str(t["state"]),
            str(t["outcome"] or "-"),
            str(t["rung"]),
            str(t["epochs"]),
            _value(t["best_value"]),
        ]
        for t in search["trials"]
    ]
    headers = ["TRIAL", "EXPERIMENT", "PARAMS", "STATE", "OUTCOME", "RUNG", "EPOCHS",
               f"BEST {str(search['metric']).upper()}"]
    marked = f"\n{BEST_MARK} best trial (deploy-best deploys it)" if best is not None else ""
    return table(headers, rows) + marked


def best_trial_text(search: dict[str, Any]) -> str:
    best = next((t for t in search.get("trials") or [] if t["index"] == search.get("best_trial")),
                None)
    if best is None:
        return f"none yet (no completed trial with a value of {search['metric']})"
    return (f"trial {best['index']} (experiment {best['experiment']}): {search['metric']} "
            f"{_value(best['best_value'])} at epoch {best['best_epoch']}; "
            f"{params_text(best['params'])}")


def trial_event(search: dict[str, Any], trial: dict[str, Any], *, first: bool) -> str:
    """One line for a trial whose state, outcome or rung changed (`tfp search follow`)."""
    adaptive = search["searcher"] == "adaptive"
    head = f"trial {trial['index']} (experiment {trial['experiment']})"
    params = params_text(trial["params"])
    if trial["outcome"]:
        where = f" at rung {trial['rung']}" if adaptive else ""
        value = trial["best_value"]
        reached = (f": best {search['metric']} {_value(value)} at epoch {trial['best_epoch']}"
                   if value is not None else "")
        return f"{head} {trial['outcome']}{where}{reached}" + (f"; {params}" if first else "")
    rung = f", rung {trial['rung']}" if adaptive else ""
    return f"{head} {trial['state']}{rung}" + (f": {params}" if first else "")


def params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{name}={_value(value)}" for name, value in params.items())


def _epochs(search: dict[str, Any]) -> str:
    if search["searcher"] != "adaptive":
        return f"{search['max_epochs']} per trial"
    return (f"up to {search['max_epochs']}: {search['grace_period']} before the first rung, "
            f"the best 1/{search['reduction_factor']} of each rung go on")


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _clip(text: str) -> str:
    return text if len(text) <= NAME_WIDTH else text[: NAME_WIDTH - 1] + "…"
