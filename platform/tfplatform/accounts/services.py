from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from django.conf import settings

from tfplatform.accounts.models import User
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
