"""`tfp notifications ...`: subscriptions to your objects' events (webhooks, email), the webhook
secret, and the delivery log."""

import argparse
import json
from collections.abc import Callable
from typing import Any

from tfplatform_cli.commands import client_for
from tfplatform_cli.errors import CliError
from tfplatform_cli.render import table, when

# The server's list is the one that counts (it refuses others with the list): shown in help.
EVENTS = ("experiment.completed, experiment.failed, search.ended, workspace.culled, "
          "deploy.available, deploy.failed")


def parsers_add(add: Callable[[str, str], argparse.ArgumentParser], *,
                common: argparse.ArgumentParser) -> None:
    group = add("notifications", "be told of your experiments, searches, workspaces and "
                "deploys by a signed webhook or email")
    sub = group.add_subparsers(dest="notifications_command", required=True,
                               metavar="SUBCOMMAND")

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary, parents=[common])

    listing = command("list", "your subscriptions")
    listing.add_argument("--json", action="store_true", help="print the API's JSON")
    listing.set_defaults(run=subscriptions_list)

    subscribe = command("add", "subscribe to events; prints the subscription's id (and, for "
                        "your first webhook, its signing secret, shown once)")
    subscribe.add_argument("--event", action="append", required=True, dest="events",
                           metavar="EVENT",
                           help=f"an event to be told of (repeat for several): {EVENTS}")
    subscribe.add_argument("--webhook", metavar="URL",
                           help="an http(s) URL on a public address that gets signed POSTs")
    subscribe.add_argument("--email", action="store_true", help="email them to your address")
    subscribe.add_argument("--team", action="store_true",
                           help="your team's objects too, not only your own")
    subscribe.set_defaults(run=subscription_add)

    remove = command("remove", "remove a subscription by its id (see `tfp notifications list`)")
    remove.add_argument("id", type=int)
    remove.set_defaults(run=subscription_remove)

    rotate = command("rotate-secret", "a new webhook secret, printed once; the old one stops "
                     "signing at once")
    rotate.set_defaults(run=secret_rotate)

    log = command("deliveries", "your latest deliveries and their attempts, newest first")
    log.add_argument("--state", choices=("pending", "delivered", "failed"))
    log.add_argument("--event", help=f"only this event: {EVENTS}")
    log.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    log.add_argument("--json", action="store_true", help="print the API's JSON")
    log.set_defaults(run=deliveries_list)


def subscriptions_list(args: argparse.Namespace) -> int:
    subscriptions = client_for(args).subscriptions()
    if args.json:
        print(json.dumps(subscriptions, indent=2, sort_keys=True))
    elif not subscriptions:
        print("No subscriptions.")
    else:
        print(table(["ID", "EVENTS", "SCOPE", "WEBHOOK", "EMAIL", "CREATED"], [
            [str(s["id"]), ",".join(s["events"]), str(s["scope"]), s["webhook_url"] or "-",
             "yes" if s["email"] else "no", when(s.get("created_at"))] for s in subscriptions]))
    return 0


def subscription_add(args: argparse.Namespace) -> int:
    if not args.webhook and not args.email:
        raise CliError("give --webhook URL, --email, or both", exit_code=2)
    fields: dict[str, Any] = {"events": args.events, "scope": "team" if args.team else "mine",
                              "webhook_url": args.webhook or "", "email": args.email}
    made = client_for(args).subscription_create(fields=fields)
    print(f"subscription {made['id']}: {', '.join(made['events'])}")
    if made.get("webhook_secret"):
        print(f"webhook secret (shown once; your receiver checks X-TFP-Signature with it): "
              f"{made['webhook_secret']}")
    return 0


def subscription_remove(args: argparse.Namespace) -> int:
    client_for(args).subscription_delete(args.id)
    print(f"subscription {args.id} removed")
    return 0


def secret_rotate(args: argparse.Namespace) -> int:
    issued = client_for(args).webhook_secret_rotate()
    print(f"webhook secret (shown once): {issued['secret']}")
    return 0


def deliveries_list(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 500:
        raise CliError("--limit is 1 to 500", exit_code=2)
    query = {"limit": args.limit, "state": args.state, "event": args.event}
    deliveries = client_for(args).deliveries(
        query={key: value for key, value in query.items() if value is not None})
    if args.json:
        print(json.dumps(deliveries, indent=2, sort_keys=True))
    elif not deliveries:
        print("No deliveries.")
    else:
        print(table(["ID", "EVENT", "TARGET", "STATE", "ATTEMPTS", "LAST ANSWER", "CREATED"], [
            [str(d["id"]), str(d["event"]), f"{d['channel']}:{d['target'] or '-'}",
             str(d["state"]), str(d["attempt_count"]), _last_answer(d),
             when(d.get("created_at"))] for d in deliveries]))
    return 0


def _last_answer(delivery: dict[str, Any]) -> str:
    if not delivery["attempts"]:
        return "-"
    last = delivery["attempts"][-1]
    status = f"HTTP {last['status_code']}" if last["status_code"] else ""
    return " ".join(part for part in (status, str(last["error"] or "")) if part) or "sent"
