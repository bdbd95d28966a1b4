"""Showback pages: the staff report with its chart and CSV, every user's own usage, and idle
GPUs flagged on the cluster page. Django's client first, then a real Chromium."""

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from tests.factories import (
    PASSWORD,
    DeviceFactory,
    ExperimentFactory,
    NodeFactory,
    TeamFactory,
    UserFactory,
)
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.web.conftest import ARTIFACTS
from tfplatform.cluster.models import Allocation, Device
from tfplatform.cluster.services import allocations_utilization_record
from tfplatform.experiments.models import Experiment, Trial


def logged_in(user: object) -> Client:
    client = Client()
    client.force_login(user)
    return client


def hold(experiment: Experiment, device: Device, *, hours_ago: float,
         hours: float | None) -> Allocation:
    start = timezone.now() - timedelta(hours=hours_ago)
    trial = Trial.objects.filter(experiment=experiment).first() or Trial.objects.create(
        experiment=experiment)
    return Allocation.objects.create(
        holder=trial, node=device.node, device=device, started_at=start,
        released_at=None if hours is None else start + timedelta(hours=hours))


def usage_world() -> dict[str, Any]:
    """Ana (vision) used 2 GPU-hours and 1 CPU-slot-hour; Carl (speech) 3 GPU-hours."""
    ana = UserFactory(username="ana", team=TeamFactory(name="vision"))
    carl = UserFactory(username="carl", team=TeamFactory(name="speech"))
    node = NodeFactory(hostname="gpu-box")
    gpus = [DeviceFactory(node=node, kind="gpu", index=i) for i in range(2)]
    cpu = DeviceFactory(node=node, kind="cpu", index=0)
    ana_exp = ExperimentFactory(owner=ana, name="ana-resnet")
    hold(ana_exp, gpus[0], hours_ago=3, hours=2)
    hold(ana_exp, cpu, hours_ago=3, hours=1)
    carl_exp = ExperimentFactory(owner=carl, name="carl-secret-asr")
    hold(carl_exp, gpus[1], hours_ago=4, hours=3)
    return {"ana": ana, "carl": carl, "ana_exp": ana_exp, "carl_exp": carl_exp}


@pytest.mark.django_db
def test_staff_page_is_staff_only() -> None:
    response = Client().get("/cluster/usage/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert logged_in(UserFactory()).get("/cluster/usage/").status_code == 404


@pytest.mark.django_db
def test_staff_page_reports_per_user_with_the_daily_chart_and_csv_link() -> None:
    usage_world()
    response = logged_in(UserFactory(is_staff=True)).get("/cluster/usage/?group_by=user")
    assert response.status_code == 200
    page = response.content.decode()
    users = re.findall(r'<td class="user">(\w+)</td>', page)
    assert users == ["carl", "ana"]  # most GPU-hours first
    assert re.search(r'id="total-gpu-hours">5\.00<', page)
    assert re.search(r'id="total-cpu-slot-hours">1\.00<', page)
    assert "not measured" in page  # emulated GPUs: no utilization, never shown as 0
    series = json.loads(re.search(r'id="usage-data" type="application/json">(.*?)</script>',
                                  page, re.S).group(1))  # type: ignore[union-attr]
    assert len(series["days"]) == 30 and series["days"][-1] == timezone.now().date().isoformat()
    assert sum(series["gpu_hours"]) == pytest.approx(5.0)
    assert 'href="/api/v1/usage.csv?group_by=user"' in page
    by_team = logged_in(UserFactory(is_staff=True)).get(
        "/cluster/usage/?group_by=team&user=&team=&experiment=&from=")  # the form's blanks
    assert re.findall(r'<td class="team">(\w+)</td>', by_team.content.decode()) == [
        "speech", "vision"]
    assert 'href="/api/v1/usage.csv?group_by=team"' in by_team.content.decode()


@pytest.mark.django_db
def test_staff_page_answers_bad_filters_with_400_not_500() -> None:
    staff = logged_in(UserFactory(is_staff=True))
    for bad in ("from=nope", "group_by=owner", "from=2026-03-05&to=2026-03-01"):
        response = staff.get(f"/cluster/usage/?{bad}")
        assert response.status_code == 400, bad


@pytest.mark.django_db
def test_csv_export_from_the_session_neutralises_formulas() -> None:
    world = usage_world()
    ExperimentFactory(owner=world["ana"], name="=cmd|' /C calc'!A0")
    evil = Experiment.objects.get(name__startswith="=")
    hold(evil, DeviceFactory(kind="gpu", index=5), hours_ago=2, hours=1)
    response = logged_in(UserFactory(is_staff=True)).get(
        "/api/v1/usage.csv?group_by=experiment")
    assert response["Content-Type"].startswith("text/csv")
    text = response.content.decode()
    assert "'=cmd|" in text and "\n=cmd" not in text and ",=cmd" not in text


@pytest.mark.django_db
def test_my_usage_shows_only_my_own_experiments() -> None:
    world = usage_world()
    ana = logged_in(world["ana"]).get("/usage/")
    assert ana.status_code == 200
    page = ana.content.decode()
    assert "ana-resnet" in page and "carl-secret-asr" not in page
    assert re.search(r'id="total-gpu-hours">2\.00<', page)
    # Asking for someone else's usage in the query string still shows one's own.
    carl = logged_in(world["carl"]).get("/usage/?user=ana&team=vision").content.decode()
    assert "carl-secret-asr" in carl and "ana-resnet" not in carl
    assert re.search(r'id="total-gpu-hours">3\.00<', carl)
    assert Client().get("/usage/").status_code == 302
    assert 'href="/usage/"' in page  # in the navigation for every user


@pytest.mark.django_db
def test_cluster_page_flags_an_idle_measured_gpu_and_not_an_emulated_one(settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(idle_gpu_minutes=10)
    node = NodeFactory(hostname="a100-box")
    real = DeviceFactory(node=node, kind="gpu", index=0, emulated=False, name="NVIDIA A100")
    busy = DeviceFactory(node=node, kind="gpu", index=1, emulated=False, name="NVIDIA A100")
    emulated = DeviceFactory(node=node, kind="gpu", index=2, emulated=True)
    for device in (real, busy, emulated):
        hold(ExperimentFactory(name=f"holder-{device.index}"), device, hours_ago=1, hours=None)
    start = timezone.now() - timedelta(minutes=30)
    for minute in range(0, 31, 5):  # recorded samples: GPU 0 at 0 %, GPU 1 at 70 %
        allocations_utilization_record(node=node, percents={0: 0.0, 1: 70.0, 2: 0.0},
                                       at=start + timedelta(minutes=minute))
    page = logged_in(UserFactory(is_staff=True)).get("/cluster/").content.decode()
    rows = {pk: re.search(rf'<tr id="device-{pk}">(.*?)</tr>', page, re.S).group(1)  # type: ignore[union-attr]
            for pk in (real.pk, busy.pk, emulated.pk)}
    assert 'class="state state-failed idle"' in rows[real.pk]
    assert "idle" not in rows[busy.pk] and "70 %" in rows[busy.pk]
    assert "not measured" in rows[emulated.pk] and "idle" not in rows[emulated.pk]
    assert re.search(r'id="idle-gpus">1<', page)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_staff_usage_page_and_my_usage_draw_their_charts(
    browser: object, live_server: object
) -> None:
    world = usage_world()
    admin = UserFactory(username="ops", is_staff=True)
    base = str(live_server.url)  # type: ignore[attr-defined]
    page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))

    def login(username: str) -> None:
        page.goto(f"{base}/login/")
        page.fill("#id_username", username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/experiments/")

    def chart() -> list[Any]:
        page.wait_for_function("() => window.Chart && Chart.getChart('usage-chart')")
        return page.evaluate("""() => { const c = Chart.getChart('usage-chart');
            return [c.width, c.height, c.data.labels.length,
                    c.data.datasets[0].data.reduce((a, b) => a + b, 0)]; }""")

    login(admin.username)
    page.click('nav >> text="Usage"')
    page.wait_for_url(f"{base}/cluster/usage/")
    width, height, days, gpu_hours = chart()
    assert width > 300 and height > 200 and days == 30 and gpu_hours == pytest.approx(5.0)
    page.select_option("#usage-form select[name=group_by]", "team")
    page.click("#usage-form button[type=submit]")
    page.wait_for_url(re.compile(r".*group_by=team.*"))
    assert page.locator("#usage-table td.team").all_inner_texts() == ["speech", "vision"]
    page.screenshot(path=str(ARTIFACTS / "usage-staff.png"), full_page=True)
    with page.expect_download() as download:
        page.click("#csv")
    assert download.value.suggested_filename.endswith(".csv")
    assert all(url.startswith(base) for url in requested)  # Chart.js is ours, no CDN

    page.context.clear_cookies()
    login(world["ana"].username)
    page.click('nav >> text="My usage"')
    page.wait_for_url(f"{base}/usage/")
    assert chart()[3] == pytest.approx(2.0)
    assert page.locator("#usage-table td.experiment").all_inner_texts() == [
        f"#{world['ana_exp'].pk} ana-resnet"]
    assert page.locator('nav >> text="Usage"').count() == 0  # the staff report: not linked
    page.screenshot(path=str(ARTIFACTS / "usage-mine.png"), full_page=True)
