"""What the workspaces app does when the experiments app tells it something."""

import logging
from typing import Any

from tfplatform.workspaces.services import workspaces_cull

logger = logging.getLogger("tfplatform.experiments.management.commands.scheduler")


def workspaces_cull_on_scheduler_pass(**_: Any) -> None:
    culled = workspaces_cull()
    if culled:
        logger.info("Stopped %d idle or expired workspace(s)", len(culled))
