"""Signal receivers (apps.py connects them)."""

from typing import Any

from tfplatform.accounts.token_cache import token_cache_clear


def token_cache_on_user_save(*, instance: Any, **_: Any) -> None:
    """A user deactivated however it happens (single sign-on, the admin, a shell) has their
    checked tokens forgotten by this process at once, and by others within
    PLATFORM_LOOKUP_CACHE_SECONDS: a cache hit does not look at the user again."""
    if not instance.is_active:
        token_cache_clear()
