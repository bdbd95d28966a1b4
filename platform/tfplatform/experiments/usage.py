"""GPU-hour showback (reads only): device-seconds per user, team, experiment and UTC day.

Totals are derived from the allocation records themselves (started_at → released_at, or now
for running ones), never from a second counter that could drift. It lives here, not in
cluster: grouping by experiment needs experiments, which sit above cluster.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.db.models import Q
from django.utils import timezone

from tfplatform.accounts.models import User
from tfplatform.accounts.visibility import visible_to
from tfplatform.cluster.models import Allocation, Device
from tfplatform.core.errors import InvalidInput, NotFound
from tfplatform.experiments.selectors.experiments import experiment_get

GROUPS = ("user", "team", "experiment", "day")
MAX_DAYS = 366


@dataclass(frozen=True, kw_only=True)
class UsageQuery:
    start: date  # first UTC day counted
    end: date  # last UTC day counted (inclusive)
    group_by: tuple[str, ...] = ("user",)
    user: str | None = None  # username
    team: str | None = None  # team name
    experiment_id: int | None = None


@dataclass(frozen=True, kw_only=True)
class AllocationSpan:
    """One allocation as showback sees it: who it was for, what it held, and when."""

    allocation_id: int
    kind: str  # Device.Kind
    started_at: datetime
    released_at: datetime | None  # None: still held
    user: str
    team: str | None
    experiment_id: int
    experiment: str
    # Mean measured GPU utilization (NVML) in percent; None: not measured (emulated slot).
    utilization: float | None


@dataclass(kw_only=True)
class UsageRow:
    user: str | None = None
    team: str | None = None
    experiment_id: int | None = None
    experiment: str | None = None
    day: date | None = None
    gpu_seconds: float = 0.0
    cpu_slot_seconds: float = 0.0
    measured_gpu_seconds: float = 0.0
    running: bool = False
    # Percent × seconds over the measured GPU time; the row's mean is this / measured seconds.
    _busy: float = 0.0
    _allocations: set[int] = field(default_factory=set)

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600

    @property
    def cpu_slot_hours(self) -> float:
        return self.cpu_slot_seconds / 3600

    @property
    def allocations(self) -> int:
        return len(self._allocations)

    @property
    def gpu_utilization(self) -> float | None:
        """Mean measured GPU utilization in percent, None when no GPU time was measured."""
        if not self.measured_gpu_seconds:
            return None
        return self._busy / self.measured_gpu_seconds


def usage_query(*, start: date | None = None, end: date | None = None,
                group_by: Iterable[str] = ("user",), user: str | None = None,
                team: str | None = None, experiment_id: int | None = None,
                today: date | None = None) -> UsageQuery:
    """A checked query; without dates, the last 30 UTC days up to today."""
    today = today or timezone.now().astimezone(UTC).date()
    end = end or today
    start = start or end - timedelta(days=29)
    if start > end:
        raise InvalidInput("'from' must not be after 'to'.", field="from")
    if (end - start).days >= MAX_DAYS:
        raise InvalidInput(f"Ask for at most {MAX_DAYS} days at once.", field="from")
    groups = tuple(dict.fromkeys(group_by))
    unknown = [name for name in groups if name not in GROUPS]
    if unknown or not groups:
        raise InvalidInput(f"group_by takes one or more of {', '.join(GROUPS)}.",
                           field="group_by")
    return UsageQuery(start=start, end=end, group_by=groups, user=user or None,
                      team=team or None, experiment_id=experiment_id)


def day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def interval_split_days(*, start: datetime, end: datetime) -> Iterator[tuple[date, float]]:
    """(UTC day, seconds) for each day [start, end) touches: an allocation spanning midnight
    is counted on both days."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    while start < end:
        next_midnight = day_start(start.date() + timedelta(days=1))
        stop = min(end, next_midnight)
        yield start.date(), (stop - start).total_seconds()
        start = stop


def usage_rows(*, spans: Iterable[AllocationSpan], query: UsageQuery,
               now: datetime) -> list[UsageRow]:
    """Group the spans' device-seconds inside the query's days by its group_by, largest GPU
    use first (days in order when grouped by day)."""
    window_start, window_end = day_start(query.start), day_start(query.end + timedelta(days=1))
    rows: dict[tuple[Any, ...], UsageRow] = {}
    for span in spans:
        if span.kind not in (Device.Kind.GPU, Device.Kind.CPU):
            continue
        start = max(span.started_at, window_start)
        end = min(span.released_at or now, window_end)
        for day, seconds in interval_split_days(start=start, end=end):
            key_fields = _key_fields(span=span, day=day, groups=query.group_by)
            row = rows.get(tuple(key_fields.values()))
            if row is None:
                row = rows[tuple(key_fields.values())] = UsageRow(**key_fields)
            row._allocations.add(span.allocation_id)
            row.running = row.running or span.released_at is None
            if span.kind == Device.Kind.CPU:
                row.cpu_slot_seconds += seconds
                continue
            row.gpu_seconds += seconds
            if span.utilization is not None:
                row.measured_gpu_seconds += seconds
                row._busy += span.utilization * seconds
    ordered = sorted(rows.values(), key=lambda r: (-r.gpu_seconds, -r.cpu_slot_seconds))
    if "day" in query.group_by:
        ordered.sort(key=lambda r: r.day or query.start)
    return ordered


def _key_fields(*, span: AllocationSpan, day: date, groups: tuple[str, ...]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if "user" in groups:
        fields["user"] = span.user
    if "team" in groups:
        fields["team"] = span.team
    if "experiment" in groups:
        fields["experiment_id"], fields["experiment"] = span.experiment_id, span.experiment
    if "day" in groups:
        fields["day"] = day
    return fields


def usage_spans(*, viewer: User | AnonymousUser, query: UsageQuery) -> list[AllocationSpan]:
    """The started allocations `viewer` may see (their experiment's owner, team, or staff)
    that overlap the query's days and match its filters."""
    _filters_check(viewer=viewer, query=query)
    window_start, window_end = day_start(query.start), day_start(query.end + timedelta(days=1))
    allocations = Allocation.objects.filter(
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


def usage_totals(*, rows: Iterable[UsageRow]) -> UsageRow:
    total = UsageRow()
    for row in rows:
        total.gpu_seconds += row.gpu_seconds
        total.cpu_slot_seconds += row.cpu_slot_seconds
        total.measured_gpu_seconds += row.measured_gpu_seconds
        total._busy += row._busy
        total._allocations |= row._allocations
        total.running = total.running or row.running
    return total
