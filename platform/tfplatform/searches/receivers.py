"""Signal receivers: each only enqueues the service that acts (apps.py connects them)."""

import logging
from typing import Any

from tfplatform.searches.models import SearchTrial
from tfplatform.searches.services import searches_settle_overdue
from tfplatform.searches.tasks import search_advance_task

logger = logging.getLogger(__name__)


def search_member_finished(*, experiment_id: int, **_: Any) -> None:
    """Sent after the commit that ended an experiment: if it is a search's trial, the search
    takes its next step in a worker. With the broker away the scheduler loop's pass does it."""
    search_id = (SearchTrial.objects.filter(experiment_id=experiment_id)
                 .values_list("search_id", flat=True).first())
    if search_id is None:
        return
    try:
        search_advance_task.delay(search_id)
    except Exception:
        logger.warning("Search %s: its next step waits for the scheduler loop (broker away)",
                       search_id, exc_info=True)


def searches_on_scheduler_pass(**_: Any) -> None:
    searches_settle_overdue()
