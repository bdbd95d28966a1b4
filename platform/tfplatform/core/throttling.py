"""A rate limit that costs the same at any rate.

DRF's throttles keep every request time of the window in one cache value and rewrite it on each
request; at the inference scope's thousands per minute that list alone added milliseconds to
every prediction (bench/inference.py). Counting per fixed window is one cache increment. It
lets a client burst to twice the rate across a window boundary, which is fine for a guard
against runaway clients.
"""

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import ScopedRateThrottle


class ScopedWindowRateThrottle(ScopedRateThrottle):
    """ScopedRateThrottle's scopes and rates, counted per fixed window."""

    def allow_request(self, request: Request, view: Any) -> bool:
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        self.rate = self.get_rate()
        limit, duration = self.parse_rate(self.rate)
        self.key = self.get_cache_key(request, view)
        if self.key is None or limit is None or duration is None:
            return True
        self.now = self.timer()
        window = int(self.now // duration)
        self.window_end = (window + 1) * duration
        key = f"{self.key}:{window}"
        self.cache.add(key, 0, timeout=duration + 1)
        try:
            count = self.cache.incr(key)
        except ValueError:  # the window expired between add() and incr()
            self.cache.set(key, 1, timeout=duration + 1)
            count = 1
        return count <= limit

    def wait(self) -> float:
        return max(0.0, self.window_end - self.now)
