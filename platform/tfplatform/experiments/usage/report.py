"""The usage report: the allocations a viewer may see, read and summed."""

from datetime import datetime, timedelta

from django.contrib.auth.models import AnonymousUser
from django.db.models import Q, QuerySet
from django.utils import timezone

from tfplatform.accounts.models import User
from tfplatform.accounts.visibility import visible_to
from tfplatform.cluster.models import Allocation
from tfplatform.cluster.placement import WHOLE_MILLI
from tfplatform.core.errors import NotFound
from tfplatform.experiments.selectors.experiments import experiment_get
from tfplatform.experiments.usage.rows import (
    AllocationSpan,
    UsageQuery,
    UsageRow,
    day_start,
    usage_rows,
)


def usage_spans(*, viewer: User | AnonymousUser, query: UsageQuery) -> list[AllocationSpan]:
    """The started allocations `viewer` may see (their experiment's owner, team, or staff)
    that overlap the query's days and match its filters."""
    _filters_check(viewer=viewer, query=query)
    window_start, window_end = day_start(query.start), day_start(query.end + timedelta(days=1))
    allocations: QuerySet[Allocation] = Allocation.objects.filter(
        Q(released_at__isnull=True) | Q(released_at__gt=window_start),
        started_at__isnull=False, started_at__lt=window_end, device__isnull=False,
    )
    allocations = visible_to(queryset=allocations, user=viewer, through="trial__experiment")
    if query.user:
        allocations = allocations.filter(trial__experiment__owner__username=query.user)
    if query.team:
        allocations = allocations.filter(trial__experiment__team__name=query.team)
    if query.experiment_id is not None:
        allocations = allocations.filter(trial__experiment_id=query.experiment_id)
    records = allocations.values(
        "pk", "device__kind", "device__emulated", "started_at", "released_at",
        "trial__experiment_id", "trial__experiment__name", "trial__experiment__owner__username",
        "trial__experiment__team__name", "utilization__samples", "utilization__percent_sum",
        "share_milli",
    ).order_by("started_at", "pk")
    # started_at is filtered non-null above; the values() dict types do not know it.
    return [
        AllocationSpan(
            allocation_id=record["pk"],
            kind=record["device__kind"],
            started_at=record["started_at"],  # type: ignore[arg-type]
            released_at=record["released_at"],
            user=record["trial__experiment__owner__username"],
            team=record["trial__experiment__team__name"],
            experiment_id=record["trial__experiment_id"],
            experiment=record["trial__experiment__name"],
            share=record["share_milli"] / WHOLE_MILLI,
            utilization=(record["utilization__percent_sum"] / record["utilization__samples"]
                         if record["utilization__samples"] else None),
        )
        for record in records
    ]


def _filters_check(*, viewer: User | AnonymousUser, query: UsageQuery) -> None:
    """Naming someone else's user, team or experiment is "not found", as their objects are."""
    if viewer.is_staff or not isinstance(viewer, User):
        return  # staff see everything; the anonymous see nothing (visible_to)
    people = Q(pk=viewer.pk) | Q(team_id=viewer.team_id) if viewer.team_id else Q(pk=viewer.pk)
    if query.user and not User.objects.filter(people, username=query.user).exists():
        raise NotFound("User not found.")
    if query.team and (viewer.team is None or query.team != viewer.team.name):
        raise NotFound("Team not found.")
    if query.experiment_id is not None:
        experiment_get(user=viewer, experiment_id=query.experiment_id)


def usage_report(*, viewer: User | AnonymousUser, query: UsageQuery,
                 now: datetime | None = None) -> list[UsageRow]:
    return usage_rows(spans=usage_spans(viewer=viewer, query=query), query=query,
                      now=now or timezone.now())
