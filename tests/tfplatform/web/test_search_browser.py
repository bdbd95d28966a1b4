"""A search launched from its form in a real Chromium: the live trials table and the chart."""

import pytest

from tests.factories import UserFactory
from tests.tfplatform.web.conftest import ARTIFACTS
from tests.tfplatform.web.search_driving import trial_train
from tests.tfplatform.web.test_browser import login
from tfplatform.searches.models import Search

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

POINTS = "n => Chart.getChart(document.getElementById('search-chart-0'))" \
         ".data.datasets.reduce((sum, d) => sum + d.data.length, 0) === n"


def test_search_form_live_table_chart_and_privacy(browser: object, live_server: object) -> None:
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    base = str(live_server.url)  # type: ignore[attr-defined]
    page = browser.new_page()  # type: ignore[attr-defined]
    login(page, base, alice.username)
    page.wait_for_url(f"{base}/experiments/")
    page.click("nav >> text=Searches")
    page.click("text=New search")

    page.fill("#id_name", "browser search")
    page.fill("#id_max_trials", "3")
    page.fill("#id_max_concurrent", "3")
    page.fill("#id_max_epochs", "2")
    page.fill("#id_space-0-high", "")  # the proposed learning_rate range, left open
    page.fill("#id_space-2-name", "batch_size")
    page.fill("#id_space-2-values", "32, 64")
    page.click("#space-add")  # a fifth row, after the two proposed and two blank ones
    page.fill("#id_space-4-name", "hidden_units")
    page.select_option("#id_space-4-kind", "int")
    page.fill("#id_space-4-low", "32")
    page.fill("#id_space-4-high", "128")
    page.fill("#id_space-4-step", "32")
    page.click("button:has-text('Launch search')")
    assert "A range needs both ends." in page.inner_text(".space-row .field-error")
    page.screenshot(path=str(ARTIFACTS / "search-form-errors.png"), full_page=True)

    page.fill("#id_space-0-high", "0.1")
    page.click("button:has-text('Launch search')")
    page.wait_for_selector("#trials")
    search = Search.objects.get(owner=alice)
    assert search.space["batch_size"] == {"values": [32, 64]}
    assert search.space["hidden_units"] == {"type": "int", "low": 32, "high": 128, "step": 32}
    assert page.inner_text("h1").startswith("browser search")
    assert page.locator("#trials tbody tr").count() == 3
    assert page.inner_text("#state") == "running"

    # The page polls: it shows each trial's metric, the best and the chart as they arrive.
    members = list(search.trials.order_by("index"))
    for member, values in zip(members, ([0.5, 0.7], [0.6, 0.9], [0.4, 0.6]), strict=True):
        trial_train(member=member, values=values)
    page.wait_for_selector("#state:has-text('completed')", timeout=20_000)
    page.wait_for_function(POINTS, arg=3, timeout=10_000)
    assert page.get_attribute("#trial-1", "class") == "best"
    assert "0.9000" in page.inner_text("#best-value")
    assert page.locator("#search-charts canvas").count() == 4
    assert page.locator("#deploy button").is_visible()
    assert "budget of 3 trials is spent" in page.inner_text("#end-reason")
    page.screenshot(path=str(ARTIFACTS / "search-detail.png"), full_page=True)

    page.click("#trial-1 a")
    page.wait_for_selector("#search-link")
    assert page.inner_text("#search-link").startswith("trial 1 of search")

    other = browser.new_page()  # type: ignore[attr-defined]
    login(other, base, bob.username)
    other.wait_for_url(f"{base}/experiments/")
    assert other.goto(f"{base}/searches/{search.pk}/").status == 404
