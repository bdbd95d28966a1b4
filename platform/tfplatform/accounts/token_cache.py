"""Checked API tokens, remembered for a moment per web process.

A module of its own so that authentication reads it and revoking a token (tokens) empties it,
without either of those importing the other. A token revoked or expired, or a user deactivated,
is refused within PLATFORM.lookup_cache_seconds (at once in the process that revoked it or
deactivated the user: receivers.py).
"""

import threading
from typing import Any

from cachetools import TTLCache
from django.conf import settings

from tfplatform.accounts.models import ApiToken

_lock = threading.Lock()
_checked: TTLCache[str, tuple[Any, ApiToken]] = TTLCache(
    maxsize=10_000, ttl=settings.PLATFORM.lookup_cache_seconds
)


def token_cache_get(*, digest: str) -> tuple[Any, ApiToken] | None:
    with _lock:
        return _checked.get(digest)


def token_cache_put(*, digest: str, found: tuple[Any, ApiToken]) -> None:
    with _lock:
        _checked[digest] = found


def token_cache_clear() -> None:
    with _lock:
        _checked.clear()
