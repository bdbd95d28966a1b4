"""`tfp audit`: the audit log (staff): who did what to which object, before → after."""

import argparse
import json
from typing import Any

from tfplatform_cli.commands import client_for
from tfplatform_cli.render import NAME_WIDTH, table, when

# The API's filters and the attributes of `args` holding them.
FILTERS = {"actor": "actor", "action": "action", "object_type": "object_type",
           "object_id": "object_id", "since": "since", "until": "until"}
CHANGE_WIDTH = 72


def audit(args: argparse.Namespace) -> int:
    # Only what was given: the server checks every value and answers a bad one (an unknown
    # action, a malformed time) with its field error; a non-staff user gets its 403.
    query: dict[str, Any] = {name: getattr(args, attribute) for name, attribute in FILTERS.items()
                             if getattr(args, attribute)}
    query |= {"limit": args.limit, "offset": args.offset}
    page = client_for(args).audit(query=query)
    if args.json:
        print(json.dumps(page, indent=2, ensure_ascii=False))
        return 0
    print(audit_table(page=page, offset=args.offset))
    return 0


def audit_table(*, page: dict[str, Any], offset: int) -> str:
    entries = page["results"]
    if not entries:
        return "No audit entries match."
    rows = [[when(e["created_at"]), e["actor"] or "(platform)",
             e["action"], _clip(f"{e['object_type']}:{e['object_id']} {e['object_repr']}"),
             change_text(before=e["before"], after=e["after"]), e["client_address"] or "-"]
            for e in entries]
    shown = f"{offset + 1}-{offset + len(entries)} of {page['count']}, newest first"
    more = "; --offset for older ones" if offset + len(entries) < page["count"] else ""
    headers = ["TIME", "ACTOR", "ACTION", "OBJECT", "BEFORE → AFTER", "CLIENT"]
    return f"{table(headers, rows)}\n\n{shown}{more}"


def change_text(*, before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    """`field: old → new` for each field, `-` where a side did not exist."""
    names = list(dict.fromkeys([*(before or {}), *(after or {})]))
    parts = [f"{name}: {_value(before, name)} → {_value(after, name)}" for name in names]
    text = "; ".join(parts) or "-"
    return text if len(text) <= CHANGE_WIDTH else text[: CHANGE_WIDTH - 1] + "…"


def _value(side: dict[str, Any] | None, name: str) -> str:
    if side is None or name not in side:
        return "-"
    value = side[name]
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _clip(text: str) -> str:
    return text if len(text) <= NAME_WIDTH * 2 else text[: NAME_WIDTH * 2 - 1] + "…"
