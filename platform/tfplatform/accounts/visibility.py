"""Who may see what: an object is visible to its owner, the owner's team and staff."""

from typing import TypeVar

from django.contrib.auth.models import AnonymousUser
from django.db.models import Model, Q, QuerySet

from tfplatform.accounts.models import User

M = TypeVar("M", bound=Model)


def visible_to(
    *, queryset: QuerySet[M], user: User | AnonymousUser, through: str = ""
) -> QuerySet[M]:
    """Filter to what `user` may see; `through` names the relation carrying owner and team."""
    if not user.is_authenticated:
        return queryset.none()
    if user.is_staff:
        return queryset
    prefix = f"{through}__" if through else ""
    condition = Q(**{f"{prefix}owner": user})
    if user.team_id is not None:
        condition |= Q(**{f"{prefix}team_id": user.team_id})
    return queryset.filter(condition)
