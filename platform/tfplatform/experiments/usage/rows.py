"""GPU-hour showback arithmetic: allocation spans cut at day boundaries and summed per group."""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.utils import timezone

from tfplatform.cluster.models import Device
from tfplatform.core.errors import InvalidInput

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
    # What part of the device it held: 1 whole; a share of a GPU counts that part of its time.
    share: float = 1.0


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
            seconds *= span.share
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
