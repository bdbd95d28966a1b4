"""`tfp list`'s search options, and `tfp tag`, `tfp note`, `tfp archive`, `tfp unarchive`."""

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from tfplatform_cli.commands import client_for
from tfplatform_cli.errors import CliError

NOTE_MAX_BYTES = 200_000


def list_arguments(listing: argparse.ArgumentParser) -> None:
    # The API's query parameters, named as it names them; the server checks every value.
    listing.add_argument("-q", "--search", metavar="WORDS",
                         help="words that must each be in the name, a tag or the note")
    listing.add_argument("--state", help="only these states: running or queued,running")
    listing.add_argument("--owner", help="only this user's")
    listing.add_argument("--team", help="only this team's")
    listing.add_argument("--tag", action="append", help="carries this tag (repeat: all of them)")
    listing.add_argument("--dataset", help="only those that read this dataset")
    listing.add_argument("--environment", help="only those that ran in this environment")
    listing.add_argument("--model", help="only this model")
    listing.add_argument("--hp", action="append", metavar="COND",
                         help="a hyperparameter condition: 'lr<0.01', optimizer=adam "
                              "(repeat for ranges)")
    listing.add_argument("--final", action="append", metavar="COND",
                         help="on a metric's last epoch value: 'val_accuracy>=0.9'")
    listing.add_argument("--best", action="append", metavar="COND",
                         help="on a metric's best epoch value: 'val_loss<0.3'")
    listing.add_argument("--sort", metavar="FIELD",
                         help="name, created_at, best.METRIC, final.METRIC, hp.NAME; "
                              "-FIELD descending (e.g. -best.val_accuracy)")
    listing.add_argument("--archived", choices=["false", "true", "any"],
                         help="archived ones are left out unless asked for")
    listing.add_argument("--json", action="store_true", help="print the API's JSON")


def parsers_add(add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    tag = add("tag", "add or remove tags on experiments")
    tag.add_argument("ids", type=int, nargs="+", metavar="ID")
    tag.add_argument("--add", action="append", default=[], metavar="TAG")
    tag.add_argument("--remove", action="append", default=[], metavar="TAG")
    tag.set_defaults(run=tags_change)

    note = add("note", "print an experiment's Markdown note, or replace it")
    note.add_argument("id", type=int)
    given = note.add_mutually_exclusive_group()
    given.add_argument("--set", metavar="TEXT", help="the new note")
    given.add_argument("--file", metavar="PATH", help="the new note from a file; - for stdin")
    note.set_defaults(run=note_change)

    for name, summary in (("archive", "leave experiments out of the list (nothing else "
                                      "changes)"),
                          ("unarchive", "put archived experiments back in the list")):
        command = add(name, summary)
        command.add_argument("ids", type=int, nargs="+", metavar="ID")
        command.set_defaults(run=archive_change, action=name)


def tags_change(args: argparse.Namespace) -> int:
    if not args.add and not args.remove:
        raise CliError("Give --add TAG or --remove TAG.", exit_code=2)
    client = client_for(args)
    for action, tags in (("tag", args.add), ("untag", args.remove)):
        if tags:
            changed = client.experiments_bulk(ids=args.ids, action=action, tags=tags)
            print(f"{action}ged {changed} experiment{'s' if changed != 1 else ''}")
    return 0


def note_change(args: argparse.Namespace) -> int:
    client = client_for(args)
    if args.set is None and args.file is None:
        text = str(client.experiment(args.id).get("note", ""))
        print(text, end="" if text.endswith("\n") or not text else "\n")
        return 0
    text = args.set if args.set is not None else _read(args.file)
    client.experiment_annotate(args.id, note=text)
    print(f"experiment {args.id}: note saved")
    return 0


def archive_change(args: argparse.Namespace) -> int:
    changed = client_for(args).experiments_bulk(ids=args.ids, action=args.action)
    print(f"{args.action}d {changed} experiment{'s' if changed != 1 else ''}")
    return 0


def _read(path: str) -> str:
    try:
        data = sys.stdin.buffer.read(NOTE_MAX_BYTES + 1) if path == "-" else (
            Path(path).read_bytes())
    except OSError as error:
        raise CliError(f"Cannot read {path}: {error.strerror}") from error
    if len(data) > NOTE_MAX_BYTES:
        raise CliError(f"{path} is over {NOTE_MAX_BYTES:,} bytes: too long for a note.")
    try:
        return data.decode()
    except UnicodeDecodeError as error:
        raise CliError(f"{path} is not UTF-8 text.") from error
