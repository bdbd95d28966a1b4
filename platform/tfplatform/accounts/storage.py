"""Per-user storage quota: what a user's uploads and published model versions take on disk,
checked before anything more is stored. Staff are not limited (they manage the disks).

The apps that store files for a user sit above accounts, so each one registers how to count its
bytes when Django starts it (its AppConfig.ready) instead of accounts reaching up to their models.
"""

from typing import Protocol

from django.conf import settings

from tfplatform.accounts.models import User
from tfplatform.core.errors import StorageQuotaExceeded

MIB = 2**20



class StorageCounter(Protocol):
    def __call__(self, *, user: User) -> int: ...


_counters: dict[str, StorageCounter] = {}


def storage_counter_register(*, name: str, counter: StorageCounter) -> None:
    """`counter(user=...)` is the bytes `name` (an app label) keeps for that user."""
    _counters[name] = counter


def storage_used(*, user: User) -> int:
    return sum(counter(user=user) for counter in _counters.values())


def storage_quota_check(*, user: User, adding: int) -> None:
    """Raises when `adding` more bytes would take the user past PLATFORM_USER_STORAGE_QUOTA_MB."""
    quota = settings.PLATFORM.user_storage_quota_mb * MIB
    if user.is_staff or not quota:
        return
    used = storage_used(user=user)
    if used + adding > quota:
        raise StorageQuotaExceeded(
            f"This would take your storage to {(used + adding) / MIB:.1f} MiB, past your quota "
            f"of {quota / MIB:.0f} MiB ({used / MIB:.1f} MiB used). Undeploy model versions "
            "you no longer need: that removes their files."
        )
