"""Reads of trials: an experiment's, and those no node has taken up."""

from datetime import timedelta

from django.conf import settings
from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from tfplatform.cluster.models import Allocation
from tfplatform.experiments.models import Experiment, Trial


def experiment_trials(*, experiment: Experiment) -> QuerySet[Trial]:
    return experiment.trials.order_by("restart_count")


def trials_dispatch_overdue_ids() -> list[int]:
    """Live trials with a part no node has taken up: never dispatched and older than a few
    seconds (the pass that made it may still be sending), or last dispatched longer ago than
    PLATFORM_DISPATCH_RETRY_SECONDS."""
    waiting = Allocation.objects.of_trials().filter(started_at__isnull=True,
                                                    released_at__isnull=True)
    never = Q(dispatched_at__isnull=True, created_at__lt=Now() - timedelta(seconds=5))
    stale = Q(dispatched_at__lt=Now() - timedelta(
        seconds=settings.PLATFORM.dispatch_retry_seconds))
    return list(
        Trial.objects.filter(never | stale, state__in=(Trial.State.PENDING, Trial.State.RUNNING),
                             pk__in=waiting.values("holder_id"))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
