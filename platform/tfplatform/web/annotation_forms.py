"""The tags-and-note form experiments and searches share (templates/_notes.html)."""

import re
from typing import Any

from django.http import QueryDict

TAG_SEPARATORS = re.compile(r"[\s,]+")


def tags_split(*, text: str) -> list[str]:
    """Tags as forms take them: separated by spaces or commas."""
    return [tag for tag in TAG_SEPARATORS.split(text.strip()) if tag]


def annotation_changes(*, form: QueryDict) -> dict[str, Any]:
    """What the posted form changes: only the fields it holds (the archive button sends one)."""
    changes: dict[str, Any] = {}
    if "tags" in form:
        changes["tags"] = tags_split(text=form.get("tags", ""))
    if "note" in form:
        # Browsers send textarea line ends as CRLF; the note keeps what was typed.
        changes["note"] = form.get("note", "").replace("\r\n", "\n")
    if "archived" in form:
        changes["archived"] = form.get("archived") == "true"
    return changes


def annotation_saved_message(*, changes: dict[str, Any]) -> str:
    if "archived" not in changes:
        return "Saved."
    return "Archived." if changes["archived"] else "Back in the list."
