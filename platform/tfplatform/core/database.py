"""The database going away (a restart, a failover) is something to wait out, not a failure."""

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import InterfaceError, OperationalError, connection

logger = logging.getLogger(__name__)
T = TypeVar("T")

# What a database that went away raises: refused or dropped connections, a server shutting down.
DATABASE_ERRORS = (OperationalError, InterfaceError)


def database_connection_reset() -> None:
    """Drops this thread's broken connection, so the next query opens a new one."""
    with contextlib.suppress(*DATABASE_ERRORS):
        connection.close()


def database_wait(*, action: Callable[[], T], what: str, timeout_seconds: float = 1800.0,
                  retry_seconds: float = 2.0) -> T:
    """`action()`, done again every `retry_seconds` while the database is away, for at most
    `timeout_seconds`; anything else it raises is the caller's."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            return action()
        except DATABASE_ERRORS:
            if time.monotonic() > deadline:
                raise
            logger.warning("The database is unavailable; %s again in %.0f s", what,
                           retry_seconds)
            database_connection_reset()
            time.sleep(retry_seconds)
