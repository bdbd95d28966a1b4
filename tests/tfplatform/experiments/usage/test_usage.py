"""GPU-hour showback: day splitting, grouping, CSV, and who sees whose usage (API)."""

import csv
import io
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import DeviceFactory, ExperimentFactory, NodeFactory, TeamFactory, UserFactory
from tfplatform.accounts.models import User
from tfplatform.cluster.models import Allocation, Device
from tfplatform.cluster.services import allocations_utilization_record
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.usage.api import usage_csv
from tfplatform.experiments.usage.rows import (
    AllocationSpan,
    UsageQuery,
    interval_split_days,
    usage_query,
    usage_rows,
)

T0 = datetime(2026, 3, 1, 22, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 3, 12, 0, tzinfo=UTC)


def span(*, pk: int = 1, kind: str = "gpu", start: datetime = T0, hours: float | None = 1.0,
         user: str = "ana", team: str | None = "vision", experiment_id: int = 1,
         utilization: float | None = None) -> AllocationSpan:
    return AllocationSpan(
        allocation_id=pk, kind=kind, started_at=start,
        released_at=None if hours is None else start + timedelta(hours=hours),
        user=user, team=team, experiment_id=experiment_id, experiment=f"exp-{experiment_id}",
        utilization=utilization)


def query(*groups: str, start: date = date(2026, 3, 1), end: date = date(2026, 3, 3),
          **filters: Any) -> UsageQuery:
    return usage_query(start=start, end=end, group_by=groups, **filters)


def test_an_interval_spanning_midnight_is_split_across_utc_days() -> None:
    start = datetime(2026, 3, 1, 23, 30, tzinfo=UTC)
    parts = list(interval_split_days(start=start, end=start + timedelta(hours=25)))
    assert parts == [(date(2026, 3, 1), 1800.0), (date(2026, 3, 2), 86400.0),
                     (date(2026, 3, 3), 1800.0)]
    # Another zone's clock is converted: 01:30 in UTC+2 is 23:30 UTC the day before.
    from datetime import timezone as tz
    local = datetime(2026, 3, 2, 1, 30, tzinfo=tz(timedelta(hours=2)))
    assert [day for day, _ in interval_split_days(start=local, end=local + timedelta(hours=1))] \
        == [date(2026, 3, 1), date(2026, 3, 2)]
    assert list(interval_split_days(start=start, end=start)) == []


def test_rows_group_by_day_split_gpu_and_cpu_hours_apart() -> None:
    spans = [
        span(pk=1, hours=4),  # 22:00 → 02:00: 2 h on the 1st, 2 h on the 2nd
        span(pk=2, kind="cpu", hours=1),  # a CPU slot: counted apart
        span(pk=3, start=T0 + timedelta(days=1), hours=1, user="ben"),
    ]
    rows = usage_rows(spans=spans, query=query("day"), now=NOW)
    assert [(r.day, r.gpu_hours, r.cpu_slot_hours) for r in rows] == [
        (date(2026, 3, 1), 2.0, 1.0), (date(2026, 3, 2), 3.0, 0.0)]
    assert rows[1].allocations == 2


def test_rows_group_by_user_team_experiment_largest_first() -> None:
    spans = [
        span(pk=1, hours=1, user="ana", experiment_id=1),
        span(pk=2, hours=3, user="ben", team=None, experiment_id=2),
        span(pk=3, hours=1, user="ana", experiment_id=3),
    ]
    by_user = usage_rows(spans=spans, query=query("user"), now=NOW)
    assert [(r.user, r.gpu_hours) for r in by_user] == [("ben", 3.0), ("ana", 2.0)]
    assert by_user[0].team is None and by_user[0].experiment_id is None  # not grouped on
    by_team = usage_rows(spans=spans, query=query("team"), now=NOW)
    assert [(r.team, r.gpu_hours) for r in by_team] == [(None, 3.0), ("vision", 2.0)]
    both = usage_rows(spans=spans, query=query("user", "experiment"),
                      now=NOW)
    assert [(r.user, r.experiment_id, r.gpu_hours) for r in both] == [
        ("ben", 2, 3.0), ("ana", 1, 1.0), ("ana", 3, 1.0)]


def test_running_allocations_count_up_to_now_and_the_window_clips() -> None:
    rows = usage_rows(spans=[span(hours=None)], now=NOW,
                      query=query("user", start=date(2026, 3, 2), end=date(2026, 3, 2)))
    assert rows[0].gpu_hours == 24.0 and rows[0].running
    rows = usage_rows(spans=[span(hours=None)], query=query("user"),
                      now=NOW)
    assert rows[0].gpu_hours == 38.0  # 22:00 on the 1st until noon on the 3rd


def test_utilization_is_time_weighted_and_none_when_not_measured() -> None:
    spans = [span(pk=1, hours=1, utilization=90.0), span(pk=2, hours=3, utilization=10.0),
             span(pk=3, hours=2, utilization=None)]
    row, = usage_rows(spans=spans, query=query("user"), now=NOW)
    assert row.gpu_hours == 6.0 and row.measured_gpu_seconds == 4 * 3600
    assert row.gpu_utilization == pytest.approx(30.0)
    emulated, = usage_rows(spans=[spans[2]], query=query("user"),
                           now=NOW)
    assert emulated.gpu_utilization is None


def test_bad_queries_are_refused() -> None:
    from tfplatform.core.errors import InvalidInput

    with pytest.raises(InvalidInput):
        usage_query(group_by=["owner"])
    with pytest.raises(InvalidInput):
        usage_query(start=date(2026, 3, 2), end=date(2026, 3, 1))
    with pytest.raises(InvalidInput):
        usage_query(start=date(2024, 1, 1), end=date(2026, 1, 1))
    assert usage_query(today=date(2026, 3, 30)).start == date(2026, 3, 1)


def test_csv_has_a_row_per_group_and_neutralises_formulas() -> None:
    spans = [span(pk=1, hours=2, user="=HYPERLINK(\"x\")", experiment_id=1),
             span(pk=2, hours=1, user="ben", team="@team")]
    q = query("user", "team", "day")
    rows = usage_rows(spans=spans, query=q, now=NOW)
    table = list(csv.reader(io.StringIO(usage_csv(query=q, rows=rows))))
    assert table[0][:4] == ["user", "team", "day", "gpu_hours"]
    assert table[1][:4] == ["'=HYPERLINK(\"x\")", "vision", "2026-03-01", "2.0"]
    assert table[2][:3] == ["ben", "'@team", "2026-03-01"]
    assert table[1][table[0].index("gpu_utilization_percent")] == ""  # not measured, not 0


# The database from here on: allocations as the scheduler and workers write them.


def hold(experiment: Experiment, device: Device, *, start: datetime,
         end: datetime | None) -> Allocation:
    trial = Trial.objects.filter(experiment=experiment).first() or Trial.objects.create(
        experiment=experiment)
    return Allocation.objects.create(holder=trial, node=device.node, device=device,
                                     started_at=start, released_at=end)


def client_for(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def two_teams() -> dict[str, object]:
    vision, speech = TeamFactory(name="vision"), TeamFactory(name="speech")
    ana = UserFactory(username="ana", team=vision)
    bea = UserFactory(username="bea", team=vision)
    carl = UserFactory(username="carl", team=speech)
    node = NodeFactory()
    gpus = [DeviceFactory(node=node, kind="gpu", index=i) for i in range(3)]
    cpu = DeviceFactory(node=node, kind="cpu", index=0)
    start = datetime(2026, 3, 1, 10, tzinfo=UTC)
    ana_exp = ExperimentFactory(owner=ana, name="ana-resnet")
    hold(ana_exp, gpus[0], start=start, end=start + timedelta(hours=2))
    hold(ana_exp, cpu, start=start, end=start + timedelta(hours=2))
    hold(ExperimentFactory(owner=bea), gpus[1], start=start, end=start + timedelta(hours=1))
    carl_exp = ExperimentFactory(owner=carl, name="carl-asr")
    hold(carl_exp, gpus[2], start=start, end=start + timedelta(hours=5))
    return {"ana": ana, "bea": bea, "carl": carl, "carl_exp": carl_exp, "ana_exp": ana_exp}


URL = "/api/v1/usage/?from=2026-03-01&to=2026-03-02"


@pytest.mark.django_db
def test_api_reports_gpu_and_cpu_hours_per_user_for_staff(two_teams: dict) -> None:
    body = client_for(UserFactory(is_staff=True)).get(URL + "&group_by=user").json()
    assert body["timezone"] == "UTC" and body["group_by"] == ["user"]
    hours = {r["user"]: (r["gpu_hours"], r["cpu_slot_hours"]) for r in body["results"]}
    assert hours == {"carl": (5.0, 0.0), "ana": (2.0, 2.0), "bea": (1.0, 0.0)}
    assert body["totals"]["gpu_hours"] == 8.0 and body["totals"]["allocations"] == 4
    assert body["results"][0]["gpu_utilization_percent"] is None  # emulated: not measured
    by_team = client_for(UserFactory(is_staff=True)).get(URL + "&group_by=team,day").json()
    assert {(r["team"], r["day"], r["gpu_hours"]) for r in by_team["results"]} == {
        ("speech", "2026-03-01", 5.0), ("vision", "2026-03-01", 3.0)}


@pytest.mark.django_db
def test_user_sees_only_their_own_and_their_teams_usage(two_teams: dict) -> None:
    ana = client_for(two_teams["ana"])
    body = ana.get(URL + "&group_by=user").json()
    assert {r["user"] for r in body["results"]} == {"ana", "bea"}
    assert body["totals"]["gpu_hours"] == 3.0
    # Someone else's user, team or experiment is not found, as their objects are.
    for param in ("user=carl", "team=speech", f"experiment={two_teams['carl_exp'].pk}",
                  "user=nobody"):
        response = ana.get(f"{URL}&{param}")
        assert response.status_code == 404, param
        assert "error" in response.json()
    assert ana.get(f"{URL}&user=bea").json()["totals"]["gpu_hours"] == 1.0
    carl = client_for(two_teams["carl"]).get(URL).json()
    assert [r["user"] for r in carl["results"]] == ["carl"]
    csv_text = client_for(two_teams["carl"]).get(
        "/api/v1/usage.csv?from=2026-03-01&to=2026-03-01").content.decode()
    assert "carl" in csv_text and "ana" not in csv_text
    assert APIClient().get(URL).status_code in (401, 403)


@pytest.mark.django_db
def test_api_filters_by_experiment_and_rejects_bad_input(two_teams: dict) -> None:
    staff = client_for(UserFactory(is_staff=True))
    body = staff.get(f"{URL}&experiment={two_teams['ana_exp'].pk}&group_by=experiment").json()
    assert [(r["experiment_name"], r["gpu_hours"], r["cpu_slot_hours"])
            for r in body["results"]] == [("ana-resnet", 2.0, 2.0)]
    for bad in ("group_by=owner", "from=yesterday", "from=2026-03-05&to=2026-03-01",
                "experiment=-1", "from=", "experiment="):
        response = staff.get(f"/api/v1/usage/?{bad}")
        assert response.status_code == 400, bad
    # Blank user, team and group_by are "not filtered", "by user", as a form sends them.
    assert staff.get(f"{URL}&user=&team=&group_by=").json()["group_by"] == ["user"]


@pytest.mark.django_db
def test_measured_utilization_reaches_the_report(two_teams: dict) -> None:
    node = NodeFactory()
    gpu = DeviceFactory(node=node, kind="gpu", index=0, emulated=False, name="NVIDIA A100")
    start = datetime(2026, 3, 2, 9, tzinfo=UTC)
    allocation = hold(two_teams["ana_exp"], gpu, start=start, end=None)
    for minute, percent in enumerate([80.0, 60.0, 100.0]):
        allocations_utilization_record(node=node, percents={0: percent},
                                       at=start + timedelta(minutes=minute))
    allocation.released_at = start + timedelta(hours=1)
    allocation.save()
    body = client_for(two_teams["ana"]).get(
        "/api/v1/usage/?from=2026-03-02&to=2026-03-02&group_by=day").json()
    row, = body["results"]
    assert row["gpu_hours"] == 1.0 and row["measured_gpu_hours"] == 1.0
    assert row["gpu_utilization_percent"] == 80.0
