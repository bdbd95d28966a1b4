"""The one write of the audit log.

    with transaction.atomic():
        before = audit_snapshot(obj=node, fields=("state",))
        ...change the node...
        audit_record(actor=request.user, action=AuditAction.NODE_CORDON, target=node,
                     before=before, after=audit_snapshot(obj=node, fields=("state",)))

The row goes into the caller's transaction: a change rolled back leaves no row, and a row is
never written for a change that did not happen. Callers record a deletion before deleting
(the target's key is gone after).
"""

from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from tfplatform.audit.middleware import request_client_address
from tfplatform.audit.models import AuditAction, AuditEntry

# Who acted: a user, or None for the platform itself. An anonymous user counts as None.
Actor = AbstractBaseUser | AnonymousUser | None
REPR_LENGTH = AuditEntry._meta.get_field("object_repr").max_length or 200


def audit_record(
    *,
    actor: Actor,
    action: str,
    target: models.Model,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
) -> AuditEntry:
    if action not in AuditAction.values:
        raise ValueError(f"Unknown audit action {action!r}: add it to AuditAction.")
    if target.pk is None:
        raise ValueError("Record a change to an object before deleting it: its key is gone.")
    user = actor if actor is not None and actor.is_authenticated else None
    return AuditEntry.objects.create(
        actor_id=user.pk if user is not None else None,
        actor_username=user.get_username() if user is not None else "",
        action=action,
        object_type=target._meta.label_lower,
        object_id=str(target.pk),
        object_repr=_text(str(target))[:REPR_LENGTH],
        before=_json_safe(dict(before)) if before is not None else None,
        after=_json_safe(dict(after)) if after is not None else None,
        client_address=request_client_address(),
    )


def audit_snapshot(*, obj: models.Model, fields: Iterable[str]) -> dict[str, Any]:
    """The fields' values as the log keeps them: a related object by its name (str), since an
    id says little to someone reading the log years later."""
    snapshot: dict[str, Any] = {}
    for name in fields:
        field = obj._meta.get_field(name)
        if field.many_to_one or field.one_to_one:
            related = getattr(obj, name)
            snapshot[name] = None if related is None else str(related)
        else:
            snapshot[name] = getattr(obj, name)
    return snapshot


def audit_changes(
    *, before: Mapping[str, Any], after: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Only the fields whose values differ, on both sides."""
    changed = [name for name in after if before.get(name) != after.get(name)]
    return ({name: before.get(name) for name in changed},
            {name: after.get(name) for name in changed})


def _text(value: str) -> str:
    return value.replace("\x00", "")  # PostgreSQL's text and jsonb refuse NUL


def _json_safe(value: Any) -> Any:
    """Plain JSON (dates as ISO text, as DjangoJSONEncoder writes them), without NUL."""
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, Mapping):
        return {_text(str(key)): _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [_json_safe(item) for item in items]
    if value is None or isinstance(value, bool | int | float):
        return value
    return _json_safe(DjangoJSONEncoder().default(value))
