"""Where a prediction's traffic goes, remembered between requests."""

import threading

from cachetools import TTLCache
from django.conf import settings
from django.contrib.auth.models import AnonymousUser

from serving.routes import ModelRoute
from tfplatform.accounts.models import User
from tfplatform.modelregistry.selectors.models import model_get, model_label_versions

_route_lock = threading.Lock()
_routes: TTLCache[tuple[object, str], ModelRoute] = TTLCache(
    maxsize=10_000, ttl=settings.PLATFORM.lookup_cache_seconds
)


def model_route_get(*, user: User | AnonymousUser, name: str) -> ModelRoute:
    """model_get + its labels, remembered for PLATFORM.lookup_cache_seconds.

    Every prediction needs them, and the two queries were a third of the platform's own time
    per request (bench/inference.py). Changes made in this process clear it at once
    (model_route_cache_clear); other web processes see them within the cache time.
    """
    key = (user.pk, name)
    with _route_lock:
        found = _routes.get(key)
    if found is None:
        model = model_get(user=user, name=name)  # not found is never remembered
        found = ModelRoute(
            name=model.name,
            canary_percent=model.canary_percent,
            labels=model_label_versions(model=model),
        )
        with _route_lock:
            _routes[key] = found
    return found


def model_route_cache_clear() -> None:
    with _route_lock:
        _routes.clear()
