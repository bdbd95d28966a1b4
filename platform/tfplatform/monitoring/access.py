"""Who may scrape /metrics: a holder of the configured bearer token, from whatever address.

No address is trusted instead: tasks, workspaces and anything else on the web app's host or
network reach it from loopback or an internal address, and the metrics name every tenant's
users, teams and experiments."""

import hmac

from django.conf import settings
from django.http import HttpRequest

from tfplatform.core.errors import Forbidden, NotFound


def metrics_scrape_check(*, request: HttpRequest) -> None:
    """Returns if `request` carries the metrics token; a wrong token is refused (403), a request
    without one is told there is nothing here (404)."""
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise NotFound()
    token = settings.PLATFORM.metrics_token
    # Compared in constant time; an unset token matches nothing.
    if token and hmac.compare_digest(presented.strip().encode(), token.encode()):
        return
    raise Forbidden("Invalid metrics token.")
