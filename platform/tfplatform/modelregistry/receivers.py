"""Signal receivers (apps.py connects them)."""

import logging
import threading
import time
from typing import Any

from django.conf import settings

from serving.client import ModelServerError
from tfplatform.modelregistry.services.access import serving_access_changed, serving_access_refresh
from tfplatform.modelregistry.services.health import serving_health_record

logger = logging.getLogger(__name__)
# Monotonic time of this process' last scrape; the interval is read at each pass, not fixed at
# the last scrape, so a changed setting takes effect at once.
_last_scrape = [float("-inf")]
_lock = threading.Lock()


def serving_health_on_scheduler_pass(**_: Any) -> None:
    """The scheduler loop is the platform's one periodic process: it scrapes the model server
    every SERVING_HEALTH_SAMPLE_SECONDS (a pass comes at least every scheduler interval)."""
    with _lock:
        now = time.monotonic()
        if now < _last_scrape[0] + settings.PLATFORM.serving_health_sample_seconds:
            return
        _last_scrape[0] = now
    try:
        serving_health_record()
    except ModelServerError as error:
        logger.warning("Serving health: the model server's metrics are unavailable (%s)",
                       error.message)


def serving_access_on_scheduler_pass(**_: Any) -> None:
    serving_access_refresh()


def serving_access_on_change(*, update_fields: frozenset[str] | None = None, **_: Any) -> None:
    """A token, user, model or label was saved or deleted. A sign-in's last_login is not a
    change the front needs."""
    if update_fields is not None and update_fields <= {"last_login"}:
        return
    serving_access_changed()
