"""`tfp reproduce` and `tfp lineage`: an experiment run again pinned, and what made a run."""

import argparse
import json
import sys
from typing import Any

from tfplatform_cli.commands import client_for
from tfplatform_cli.errors import CliError
from tfplatform_cli.follow import experiment_follow

HASH_SHOWN = 12


def reproduce(args: argparse.Namespace) -> int:
    """The new experiment's id on stdout (as `tfp submit`); what was pinned, what differs and
    what never is on stderr."""
    client = client_for(args)
    answer = client.experiment_reproduce(args.id, allow_changes=args.allow_changes)
    created = answer["experiment"]
    print(created["id"], flush=True)
    for title, lines in (("pinned", answer["pinned"]), ("differs", answer["changes"]),
                         ("note", answer["notes"])):
        for line in lines:
            print(f"{title}: {line}", file=sys.stderr)
    if args.wait:
        finished = experiment_follow(client, int(created["id"]), logs=True)
        if finished["state"] != "completed":
            raise CliError(f"experiment {created['id']} {finished['state']}")
    return 0


def lineage(args: argparse.Namespace) -> int:
    found = client_for(args).experiment_lineage(args.id)
    if args.json:
        print(json.dumps(found, indent=2, ensure_ascii=False))
    else:
        print(lineage_text(found))
    return 0


def lineage_text(found: dict[str, Any]) -> str:
    lines = [f"experiment  #{found['experiment_id']} {found['experiment_name']} "
             f"({found['owner']})"
             + (f", reproduces #{found['reproduced_from_id']}"
                if found["reproduced_from_id"] else "")]
    if found["trial_id"] is None:
        lines.append("trial       none has recorded what it ran with yet")
    else:
        lines.append(f"trial       attempt {found['trial_attempt']} ({found['trial_state']}), "
                     f"TensorFlow {found['tensorflow_version'] or 'not reported'}, on "
                     f"{', '.join(found['nodes']) or '-'}")
    dataset = found["dataset"]
    version = f" version {dataset['version']}" if dataset["version"] else ""
    print_hash = dataset["fingerprint"] or dataset["fingerprint_seen"]
    flags = [flag for flag, on in (("deleted", dataset["deleted"]),
                                   ("files changed since registration", dataset["changed"]))
             if on]
    lines.append(f"dataset     {dataset['name']}{version}"
                 + (f", fingerprint {print_hash[:HASH_SHOWN]}" if print_hash else "")
                 + (f" ({', '.join(flags)})" if flags else ""))
    environment = found["environment"]
    if environment is None:
        lines.append("environment the node's own runtime")
    else:
        revision = f" revision {environment['revision']}" if environment["revision"] else ""
        changed = (f" (changed since: now revision {environment['current_revision']})"
                   if environment["changed_since"] else "")
        how = "resolved" if environment["packages_resolved"] else "pinned"
        lines.append(f"environment {environment['name']}{revision}, hash "
                     f"{environment['content_hash'][:HASH_SHOWN] or '-'}{changed}")
        lines.append(f"            {environment['image']}, TensorFlow "
                     f"{environment['tensorflow_version']}; {len(environment['packages'])} "
                     f"packages {how}: {' '.join(environment['packages']) or '-'}")
    lines.append(f"module      {found['module']}, sha256 "
                 f"{found['module_sha256'][:HASH_SHOWN] or '-'}")
    lines.append(f"seed        {found['seed'] if found['seed'] is not None else '-'}")
    return "\n".join(lines)
