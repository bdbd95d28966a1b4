"""`tfp workspace ...`: JupyterLab sessions on scheduled devices."""

import argparse
import json
from typing import Any

from tfplatform_cli.commands import client_for
from tfplatform_cli.errors import CliError
from tfplatform_cli.render import gpus_each

COLUMNS = ("id", "name", "state", "gpus", "cpu_slots", "devices", "url")


def _row(workspace: dict[str, Any], *, server: str) -> list[str]:
    devices = ",".join(workspace["devices"]) or "-"
    # Absolute where the lab has an origin of its own, else a path on the server's.
    lab = str(workspace["lab_url"])
    url = lab if lab.startswith(("http://", "https://")) else f"{server}{lab}"
    url = url if workspace["state"] == "running" else "-"
    # A server older than CPU slots sends none: its workspaces hold one.
    shared = workspace.get("gpu_fraction") or workspace.get("gpu_memory_mb")
    cpu_slots = "-" if workspace["gpus"] or shared else str(workspace.get("cpu_slots", 1))
    gpus = gpus_each(workspace) if shared else str(workspace["gpus"])
    return [str(workspace["id"]), workspace["name"], workspace["state"], gpus,
            cpu_slots, devices, url]


def _table(workspaces: list[dict[str, Any]], *, server: str) -> str:
    rows = [list(COLUMNS)] + [_row(w, server=server) for w in workspaces]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
                     for row in rows)


def _describe(workspace: dict[str, Any]) -> str:
    reason = f": {workspace['pending_reason']}" if workspace.get("pending_reason") else ""
    return f"workspace {workspace['id']} ({workspace['name']}) {workspace['state']}{reason}"


def workspaces_list(args: argparse.Namespace) -> int:
    client = client_for(args)
    workspaces = client.workspaces()
    if args.json:
        print(json.dumps(workspaces, indent=2, sort_keys=True))
    elif not workspaces:
        print("No workspaces.")
    else:
        print(_table(workspaces, server=client.server))
    return 0


def start(args: argparse.Namespace) -> int:
    """A new workspace by name, or a stopped one again by id."""
    client = client_for(args)
    if args.id is None and not args.name:
        raise CliError("give a new workspace's --name, or the id of a stopped one")
    if args.id is not None:
        workspace = client.workspace_action(args.id, action="start")
    else:
        fields: dict[str, Any] = {"name": args.name, "gpus": args.gpus,
                                  "cpu_slots": args.cpu_slots, "priority": args.priority}
        if args.environment:
            fields["environment"] = args.environment
        if args.gpu_fraction is not None:
            fields["gpu_fraction"] = args.gpu_fraction
        if args.gpu_memory_mb is not None:
            fields["gpu_memory_mb"] = args.gpu_memory_mb
        if args.pool:
            fields["pool"] = args.pool
        if args.gpu_type:
            fields["gpu_type"] = args.gpu_type
        workspace = client.workspace_create(fields=fields)
    print(_describe(workspace))
    return 0


def stop(args: argparse.Namespace) -> int:
    workspace = client_for(args).workspace_action(args.id, action="stop")
    print(f"workspace {workspace['id']} stopping; its home folder is kept")
    return 0


def restart(args: argparse.Namespace) -> int:
    fields = {key: value for key, value in (("gpus", args.gpus), ("cpu_slots", args.cpu_slots))
              if value is not None}
    workspace = client_for(args).workspace_action(args.id, action="restart", fields=fields)
    print(f"{_describe(workspace)} (a new session on a new allocation; the home folder is kept)")
    return 0
