from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from django.conf import settings
from django.db import transaction

from tfplatform.accounts.models import User
from tfplatform.accounts.tokens import api_tokens_revoke_all
from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import Actor, audit_record
from tfplatform.core.errors import TooManyRequests


def admin_ensure(*, username: str, password: str) -> bool:
    """Create a superuser unless one exists; True when one was created."""
    if User.objects.filter(is_superuser=True).exists():
        return False
    User.objects.create_superuser(username=username, password=password, email="")
    return True


def sign_in_check(*, request: Any, username: str) -> None:
    """Refuses a sign-in for a username locked out from this address after repeated failures
    (django-axes), before its password is even compared."""
    if AxesProxyHandler.is_locked(request, credentials={"username": username}):
        minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
        raise TooManyRequests(
            f"Too many failed sign-ins for {username!r} from this address; try again in "
            f"{minutes} minutes."
        )


def user_deactivate(*, user: User, actor: Actor = None) -> None:
    """Ends a user's access: no sign-in, no web session (Django refuses an inactive user's), and
    no API token: they are revoked, not merely refused, so reactivating the user brings none
    back. `actor` None: the platform, on the identity provider's word."""
    with transaction.atomic():
        if user.is_active:
            user.is_active = False
            user.save(update_fields=["is_active"])
            audit_record(actor=actor, action=AuditAction.USER_DEACTIVATE, target=user,
                         before={"is_active": True}, after={"is_active": False})
        api_tokens_revoke_all(user=user, actor=actor)
