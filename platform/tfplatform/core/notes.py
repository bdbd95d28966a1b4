"""Tags and Markdown notes, as experiments and searches carry them.

A note is its team's Markdown and is shown to the whole team: it is rendered with HTML in the
source off (markdown-it's CommonMark, tables and strikethrough), then sanitized by nh3 as well,
so neither raw HTML nor a `javascript:` link nor an attribute the renderer would pass can run
in a teammate's browser.
"""

import re

import nh3
from markdown_it import MarkdownIt

from tfplatform.core.errors import InvalidInput

TAG_MAX_CHARS = 64


TAGS_MAX = 50


NOTE_MAX_CHARS = 50_000


# Letters, digits and a few joiners, as ClearML and MLflow users write them ("baseline",
# "lr-sweep", "team/vision", "v1.2"); no spaces or commas, which separate tags in forms and
# the CLI.
TAG_PATTERN = re.compile(r"[\w][\w.:/+@=-]*")


_ALLOWED_TAGS = {
    "a", "p", "br", "hr", "strong", "em", "s", "del", "code", "pre", "blockquote",
    "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td",
}


_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
    ["table", "strikethrough"]
)


def tags_clean(*, tags: list[str], field: str = "tags") -> list[str]:
    """The tags as stored: stripped, each checked, duplicates dropped, in the given order."""
    if len(tags) > TAGS_MAX:
        raise InvalidInput(f"At most {TAGS_MAX} tags.", field=field)
    cleaned: list[str] = []
    for raw in tags:
        tag = raw.strip() if isinstance(raw, str) else ""
        if not tag or len(tag) > TAG_MAX_CHARS or not TAG_PATTERN.fullmatch(tag):
            shown = tag[:TAG_MAX_CHARS] + ("…" if len(tag) > TAG_MAX_CHARS else "")
            raise InvalidInput(
                f"Tag {shown!r} is not a tag: 1 to {TAG_MAX_CHARS} letters, digits or "
                "_ . : / + @ = -, starting with a letter, digit or _.",
                field=field,
            )
        if tag not in cleaned:
            cleaned.append(tag)
    return cleaned


def note_clean(*, note: str, field: str = "note") -> str:
    if len(note) > NOTE_MAX_CHARS:
        raise InvalidInput(f"A note holds at most {NOTE_MAX_CHARS:,} characters.", field=field)
    if "\x00" in note:
        raise InvalidInput("A note cannot contain NUL characters.", field=field)
    return note


def note_render(*, note: str) -> str:
    """The note as safe HTML: what any teammate's browser may be given."""
    if not note:
        return ""
    return nh3.clean(
        _markdown.render(note),
        tags=_ALLOWED_TAGS,
        attributes={"a": {"href", "title"}, "th": {"style"}, "td": {"style"}},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        filter_style_properties={"text-align"},
    )
