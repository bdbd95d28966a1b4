"""Signal receivers (apps.py connects them)."""

import logging
import threading
import time
from typing import Any

from django.conf import settings

from serving.client import ModelServerError
from tfplatform.modelregistry.services import serving_health_record

logger = logging.getLogger(__name__)
_next_scrape = [0.0]  # monotonic time of the scheduler process' next scrape
_lock = threading.Lock()


def serving_health_on_scheduler_pass(**_: Any) -> None:
    """The scheduler loop is the platform's one periodic process: it scrapes the model server
    every SERVING_HEALTH_SAMPLE_SECONDS (a pass comes at least every scheduler interval)."""
    with _lock:
        if time.monotonic() < _next_scrape[0]:
            return
        _next_scrape[0] = time.monotonic() + settings.PLATFORM["SERVING_HEALTH_SAMPLE_SECONDS"]
    try:
        serving_health_record()
    except ModelServerError as error:
        logger.warning("Serving health: the model server's metrics are unavailable (%s)",
                       error.message)
