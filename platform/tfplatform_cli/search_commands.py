"""`tfp search ...`: hyperparameter searches, each trial an experiment of its own."""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tfplatform_cli import search_render
from tfplatform_cli.commands import client_for
from tfplatform_cli.errors import CliError
from tfplatform_cli.follow import search_follow, version_wait
from tfplatform_cli.spec import search_spec_load


def submit(args: argparse.Namespace) -> int:
    fields = search_spec_load(Path(args.file))
    client = client_for(args)
    created = client.search_create(fields=fields)
    print(created["id"], flush=True)
    # On stderr, so that stdout stays the id for `ID=$(tfp search submit ...)`.
    experiments = ", ".join(str(t["experiment"]) for t in created["trials"])
    print(f"search {created['id']}: {len(created['trials'])} of {created['max_trials']} trials "
          f"submitted (experiments {experiments})", file=sys.stderr, flush=True)
    if args.follow:
        return _ended(search_follow(client, int(created["id"])))
    return 0


def searches_list(args: argparse.Namespace) -> int:
    searches = client_for(args).searches(
        filters={"q": args.search, "tag": args.tag, "archived": args.archived})
    if args.json:
        _print_json(searches)
    elif not searches:
        print("No searches.")
    else:
        print(search_render.searches_table(searches))
    return 0


def show(args: argparse.Namespace) -> int:
    search = client_for(args).search(args.id)
    if args.json:
        _print_json(search)
    else:
        print(search_render.search_status(search))
    return 0


def follow(args: argparse.Namespace) -> int:
    return _ended(search_follow(client_for(args), args.id))


def cancel(args: argparse.Namespace) -> int:
    search = client_for(args).search_cancel(args.id)
    stopping = sum(1 for t in search["trials"] if t["state"] in ("scheduled", "running"))
    note = f"; {stopping} training trial(s) asked to stop" if stopping else ""
    print(f"search {args.id} canceled{note}")
    return 0


def deploy_best(args: argparse.Namespace) -> int:
    client = client_for(args)
    search = client.search(args.id)
    version = client.search_best_deploy(args.id, model_name=args.model_name, tflite=args.tflite)
    if args.wait:
        version = {**version, **version_wait(client, name=args.model_name,
                                             version=version["version"])}
    print(f"search {args.id}: trial {search['best_trial']} deployed as {args.model_name} "
          f"version {version['version']} ({version['state']})")
    if version["state"] not in ("available", "loading") or (
            args.wait and version["state"] != "available"):
        reason = f": {version['error']}" if version.get("error") else ""
        raise CliError(f"{args.model_name} version {version['version']} is "
                       f"{version['state']}{reason}")
    return 0


def csv(args: argparse.Namespace) -> int:
    text = client_for(args).search_csv(args.id)
    if not args.output:
        sys.stdout.write(text)
        return 0
    target = Path(args.output)
    if target.is_dir():
        target = target / f"search-{args.id}.csv"
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as error:
        raise CliError(f"cannot write {target}: {error.strerror or error}") from error
    rows = max(len(text.splitlines()) - 1, 0)
    print(f"{target} ({rows} trials)")
    return 0


def _ended(search: dict[str, Any]) -> int:
    """0 for a search that completed with a best trial; a canceled one, or one none of whose
    trials completed (each failed), is a failed command, as a failed experiment is."""
    reason = str(search.get("end_reason") or "").strip()
    ended = f"search {search['id']} {search['state']}" + (f": {reason}" if reason else "")
    if search.get("best_trial") is not None:
        print(f"best {search_render.best_trial_text(search)}", flush=True)
    if search["state"] != "completed":
        raise CliError(ended)
    print(ended, file=sys.stderr, flush=True)
    if search.get("best_trial") is None:
        raise CliError(f"search {search['id']} has no best trial: none completed with a value "
                       f"of {search['metric']}")
    return 0


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))
