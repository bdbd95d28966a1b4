"""API token authentication that remembers a checked token for a moment.

Inference clients send a request every few milliseconds, and looking the token and its user up
was a third of the platform's own time per prediction (bench/inference.py). A token deleted or
a user deactivated is refused within PLATFORM["LOOKUP_CACHE_SECONDS"].
"""

import threading
from typing import Any

from cachetools import TTLCache
from django.conf import settings
from rest_framework.authentication import TokenAuthentication

_lock = threading.Lock()
_checked: TTLCache[str, tuple[Any, Any]] = TTLCache(
    maxsize=10_000, ttl=settings.PLATFORM["LOOKUP_CACHE_SECONDS"]
)


class CachedTokenAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        with _lock:
            found = _checked.get(key)
        if found is None:
            found = super().authenticate_credentials(key)  # raises for unknown or inactive
            with _lock:
                _checked[key] = found
        user, token = found
        # Each request gets its own user object: views may annotate it. __getstate__ is the copy
        # copy.copy makes (own _state, own field cache) without pickle's protocol around it.
        clone = user.__class__.__new__(user.__class__)
        clone.__dict__.update(user.__getstate__())
        return clone, token


def token_cache_clear() -> None:
    with _lock:
        _checked.clear()
