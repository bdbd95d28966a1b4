"""Writing what a team notes on a run, for every kind that has tags, a note and `archived`
(experiments, searches): one service, so the kinds cannot drift apart."""

from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import transaction
from django.db.models import Model

from tfplatform.core.notes import note_clean, tags_clean

M = TypeVar("M", bound=Model)


def annotations_apply(*, obj: M, tag_model: type[Model], tagged_field: str,
                      tags: Sequence[str] | None = None, note: str | None = None,
                      archived: bool | None = None) -> M:
    """Replace what is given (all of `obj`'s tags, its note, archived); leave the rest.
    `tag_model` holds one row per tag, its `tagged_field` pointing at `obj`."""
    cleaned = None if tags is None else tags_clean(tags=list(tags))
    changed: dict[str, Any] = {name: value for name, value in (
        ("note", None if note is None else note_clean(note=note)), ("archived", archived))
        if value is not None}
    manager: Any = type(obj)._default_manager
    with transaction.atomic():
        current = manager.select_for_update().get(pk=obj.pk)
        for name, value in changed.items():
            setattr(current, name, value)
        if changed:
            current.save(update_fields=[*changed, "updated_at"])
        if cleaned is not None:
            rows: Any = tag_model._default_manager
            rows.filter(**{tagged_field: current}).exclude(name__in=cleaned).delete()
            rows.bulk_create([tag_model(**{tagged_field: current, "name": tag})
                              for tag in cleaned], ignore_conflicts=True)
    return current
