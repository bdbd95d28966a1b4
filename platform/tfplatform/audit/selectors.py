from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet

from tfplatform.audit.models import AuditEntry


def audit_entries(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[AuditEntry]:
    """The log, newest first: staff read all of it, everyone else none."""
    if not user.is_authenticated or not getattr(user, "is_staff", False):
        return AuditEntry.objects.none()
    return AuditEntry.objects.all()
