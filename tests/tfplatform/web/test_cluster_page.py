"""The staff cluster console: plain Django client tests, then one in a real Chromium."""

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
    UserFactory,
)
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.web.conftest import ARTIFACTS
from tfplatform.cluster.models import Node, UtilizationSample
from tfplatform.cluster.utilization import utilization_record
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.selectors.experiments import experiment_state_counts
from tfplatform.experiments.services.scheduling import scheduler_pass

GIB = 1024**3


def logged_in(user: object, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def staff() -> Client:
    return logged_in(UserFactory(is_staff=True))


def busy_cluster() -> tuple[Node, object]:
    """A node with two GPUs and a CPU slot, one GPU held by a scheduled experiment."""
    node = NodeFactory(
        hostname="gpu-box-1",
        address="10.0.0.11",
        os_info="Linux-6.1 / Python 3.11",
        cpu_count=16,
        memory_bytes=64 * GIB,
    )
    DeviceFactory(
        node=node,
        kind="gpu",
        index=0,
        name="NVIDIA A100",
        memory_bytes=40 * GIB,
        compute_capability="8.0",
        emulated=False,
    )
    DeviceFactory(node=node, kind="gpu", index=1)
    DeviceFactory(node=node, kind="cpu", index=0, name="cpu slot", emulated=False)
    owner = UserFactory(username="dana")
    holder = ExperimentFactory(owner=owner, name="resnet-sweep", gpus_per_worker=2)
    assert scheduler_pass() == 1
    ExperimentFactory(name="waits-1", gpus_per_worker=4)
    ExperimentFactory(name="waits-2", gpus_per_worker=4)
    return node, holder


@pytest.mark.django_db
def test_anonymous_is_sent_to_login_and_non_staff_get_404() -> None:
    node = NodeFactory()
    response = Client().get("/cluster/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    user = logged_in(UserFactory())
    assert user.get("/cluster/").status_code == 404
    assert user.post(f"/cluster/nodes/{node.pk}/state/", {"action": "cordon"}).status_code == 404
    node.refresh_from_db()
    assert node.state == "ready"
    assert "/cluster/" not in user.get("/experiments/").content.decode()


@pytest.mark.django_db
def test_staff_sees_nodes_devices_holders_and_queue() -> None:
    _, holder = busy_cluster()
    NodeFactory(hostname="idle-box", state=Node.State.CORDONED)
    # Workspace sessions are counted as workspaces, never as queued or running experiments.
    for state in ("queued", "queued", "queued", "running"):
        ExperimentFactory(kind=Experiment.Kind.WORKSPACE, state=state)
    client = staff()
    html = client.get("/cluster/").content.decode()
    assert 'href="/cluster/"' in html  # the nav link staff get
    for text in ("gpu-box-1", "10.0.0.11", "Linux-6.1 / Python 3.11", "64.0\xa0GB", "idle-box"):
        assert text in html
    for text in ("NVIDIA A100", "40.0\xa0GB", "8.0", "emulated"):
        assert text in html
    assert f'<a href="/experiments/{holder.pk}/">#{holder.pk} resnet-sweep</a>' in html
    assert "dana" in html and "worker:0" in html
    assert 'id="queued">2</div>' in html
    assert 'id="workspaces">1 <small>running · 3 queued</small>' in html
    assert 'id="gpus">2 <small>/ 2</small>' in html
    assert 'id="cpu-slots">0 <small>/ 1</small>' in html
    assert html.count('class="holder empty">free</td>') == 1
    # No history yet: no chart, no chart library, and a hint at what records it.
    assert "No samples yet" in html and "chart.umd.min.js" not in html


@pytest.mark.django_db
def test_each_node_shows_its_trial_runtime_and_a_node_without_isolation_is_flagged() -> None:
    sandboxed = NodeFactory(hostname="sandboxed-box")
    containers = NodeFactory(hostname="podman-box", trial_runtime="podman")
    unisolated = NodeFactory(hostname="dev-box", unisolated=True)
    html = staff().get("/cluster/").content.decode()
    sections = {
        node.hostname: html.split(f'id="node-{node.pk}"', 1)[1].split("</section>", 1)[0]
        for node in (sandboxed, containers, unisolated)
    }
    assert 'class="trial-runtime">sandbox <small>(isolated)</small>' in sections["sandboxed-box"]
    assert "not isolated" not in sections["sandboxed-box"]
    assert "podman <small>(isolated: a container per task)" in sections["podman-box"]
    assert "not isolated" not in sections["podman-box"]
    assert 'class="trial-runtime">process' in sections["dev-box"]
    assert 'not-isolated" title="Trials on this node run as plain processes' in sections["dev-box"]
    assert ">not isolated</span>" in sections["dev-box"]
    assert html.count(">not isolated</span>") == 1


@pytest.mark.django_db
def test_each_node_shows_its_free_work_disk_and_a_full_one_is_flagged(settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(work_disk_min_free_mb=100)
    roomy = NodeFactory(hostname="roomy", work_disk_free_bytes=3 * 2**30)
    crowded = NodeFactory(hostname="crowded", work_disk_free_bytes=2 * 2**20)
    html = staff().get("/cluster/").content.decode()
    roomy_html, crowded_html = (
        html.split(f'id="node-{node.pk}"', 1)[1].split("</section>", 1)[0]
        for node in (roomy, crowded)
    )
    assert 'class="work-disk">3.0\xa0GB free</dd>' in roomy_html
    assert "disk full" not in roomy_html
    assert 'class="work-disk">2.0\xa0MB free <span class="state state-failed disk-full"' in (
        crowded_html)


@pytest.mark.django_db
def test_page_embeds_utilization_history_for_the_chart() -> None:
    busy_cluster()
    utilization_record(**experiment_state_counts())
    html = staff().get("/cluster/").content.decode()
    assert '<script id="utilization-data" type="application/json">' in html
    assert '"gpus_used": [2]' in html and '"queued": [2]' in html
    assert "/static/vendor/chart.umd.min.js" in html and "/static/js/cluster.js" in html
    # Served from here, nothing from elsewhere (a CSRF token may well contain "cdn").
    assert re.search(r'(src|href)="(https?:)?//', html) is None


@pytest.mark.django_db
def test_cordon_drain_enable_buttons_change_the_state() -> None:
    node = NodeFactory(hostname="box")
    client = staff()
    for action, state in (("cordon", "cordoned"), ("drain", "draining"), ("enable", "ready")):
        response = client.post(f"/cluster/nodes/{node.pk}/state/", {"action": action}, follow=True)
        assert response.redirect_chain == [("/cluster/", 302)]
        assert f"box is now {state}." in response.content.decode()
        node.refresh_from_db()
        assert node.state == state
    assert client.post(f"/cluster/nodes/{node.pk}/state/", {"action": "lose"}).status_code == 404
    assert client.post("/cluster/nodes/999999/state/", {"action": "cordon"}).status_code == 404
    assert client.get(f"/cluster/nodes/{node.pk}/state/").status_code == 405


@pytest.mark.django_db
def test_node_buttons_post_with_csrf_token() -> None:
    node = NodeFactory()
    client = logged_in(UserFactory(is_staff=True), csrf=True)
    url = f"/cluster/nodes/{node.pk}/state/"
    html = client.get("/cluster/").content.decode()
    assert f'action="{url}"' in html and "csrfmiddlewaretoken" in html
    assert client.post(url, {"action": "cordon"}).status_code == 403
    token = client.cookies["csrftoken"].value
    response = client.post(url, {"action": "cordon", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    node.refresh_from_db()
    assert node.state == "cordoned"


def an_hour_of_history() -> None:
    """A plausible last hour, ending where busy_cluster() is: GPUs filling, the queue draining."""
    now = timezone.now()
    UtilizationSample.objects.bulk_create(
        UtilizationSample(
            recorded_at=now - timedelta(minutes=60 - minute),
            gpus_total=2,
            gpus_used=min(2, minute // 20),
            cpu_slots_total=1,
            cpu_slots_used=1 if 15 <= minute < 45 else 0,
            queued=max(2, 6 - minute // 10),
            running=1 if 20 <= minute < 50 else 0,
        )
        for minute in range(60)
    )


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_staff_console_draws_the_chart_from_local_files(
    browser: object, live_server: object
) -> None:
    admin = UserFactory(username="ops", is_staff=True)
    node, holder = busy_cluster()
    an_hour_of_history()
    utilization_record(**experiment_state_counts())
    base = str(live_server.url)  # type: ignore[attr-defined]
    page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"{base}/login/")
    page.fill("#id_username", admin.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/experiments/")

    page.click("nav >> text=Cluster")
    page.wait_for_url(f"{base}/cluster/")
    page.wait_for_function("() => window.Chart && Chart.getChart('devices-chart')")
    for canvas_id in ("devices-chart", "experiments-chart"):
        drawn = page.evaluate(
            """id => { const chart = Chart.getChart(id);
                return [chart.width, chart.height, chart.data.labels.length]; }""",
            canvas_id,
        )
        assert drawn[0] > 300 and drawn[1] > 200 and drawn[2] == 61
    holders = page.locator(f"#node-{node.pk} .holder a")
    assert holders.all_inner_texts() == [f"#{holder.pk} resnet-sweep"] * 2
    assert page.inner_text("#queued") == "2"
    # Everything, the chart library included, came from our own server: no CDN.
    assert requested and all(url.startswith(base) for url in requested)
    page.screenshot(path=str(ARTIFACTS / "cluster.png"), full_page=True)

    page.click(f"#node-{node.pk} button:has-text('Cordon')")
    page.wait_for_selector("text=gpu-box-1 is now cordoned.")
    assert page.inner_text(f"#node-{node.pk} .heading .state") == "cordoned"
    node.refresh_from_db()
    assert node.state == "cordoned"
