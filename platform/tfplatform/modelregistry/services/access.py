"""Pushes to the model server's front (serving/front.py: the embedded server's, or the gateway's
in front of stock TF Serving): at once after a change to tokens, users or models, and every
TF_SERVING_FRONT_REFRESH_SECONDS from the scheduler loop, so a missed push is made good and the
front never trusts a table past its maximum age."""

import logging
import threading
import time

from django.conf import settings
from django.db import transaction

from serving.client import ModelServerError
from tfplatform.modelregistry.selectors.access import serving_access_table, serving_front_on
from tfplatform.modelregistry.server import front_client

logger = logging.getLogger(__name__)
_lock = threading.Lock()
_last_push = [float("-inf")]  # monotonic time of this process' last good push
_failing = [False]


def serving_access_push() -> bool:
    """Pushes the current table now; False (logged once per outage) when the server does not
    take it. Does nothing when the front is off."""
    if not serving_front_on():
        return False
    try:
        front_client().access_push(table=serving_access_table())
    except ModelServerError as error:
        if not _failing[0]:
            logger.warning("The model server's front did not take the access table: %s",
                           error.message)
        _failing[0] = True
        return False
    if _failing[0]:
        logger.info("The model server's front takes the access table again.")
    _failing[0] = False
    with _lock:
        _last_push[0] = time.monotonic()
    return True


def serving_access_changed() -> None:
    """Tokens, users or models changed: push once the change is committed (none if it rolls
    back), so a revoked token stops at once rather than at the next refresh."""
    if serving_front_on():
        transaction.on_commit(serving_access_push, robust=True)


def serving_access_refresh() -> bool:
    """Pushes when the last push is older than the refresh interval (the scheduler loop's pace
    calls it)."""
    refresh = settings.PLATFORM.tf_serving_front_refresh_seconds
    with _lock:
        due = serving_front_on() and time.monotonic() >= _last_push[0] + refresh
    return serving_access_push() if due else False
