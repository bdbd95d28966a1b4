"""The web UI shell in a real Chromium (Debian's), driven by Playwright."""

import pytest

from tests.factories import PASSWORD, UserFactory
from tests.tfplatform.web.conftest import ARTIFACTS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def login(page: object, base: str, username: str) -> None:
    page.goto(f"{base}/login/")  # type: ignore[attr-defined]
    page.fill("#id_username", username)  # type: ignore[attr-defined]
    page.fill("#id_password", PASSWORD)  # type: ignore[attr-defined]
    page.click("button[type=submit]")  # type: ignore[attr-defined]


def test_login_launch_from_form_and_privacy(browser: object, live_server: object) -> None:
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    base = str(live_server.url)  # type: ignore[attr-defined]
    page = browser.new_page()  # type: ignore[attr-defined]
    login(page, base, alice.username)
    page.wait_for_url(f"{base}/experiments/")
    page.screenshot(path=str(ARTIFACTS / "experiments-empty.png"))

    page.click("text=New experiment")
    page.fill("#id_name", "browser launched")
    page.fill("#id_workers", "0")
    page.click("button:has-text('Launch')")
    assert "Ensure this value is greater than or equal to 1" in page.inner_text(".field-error")
    page.screenshot(path=str(ARTIFACTS / "experiment-form-errors.png"))

    page.fill("#id_workers", "1")
    page.select_option("#id_model", "mlp")
    page.select_option("#id_dataset", "digits")
    page.click("button:has-text('Launch')")
    page.wait_for_selector("#state")
    assert page.inner_text("h1").startswith("browser launched")
    assert page.inner_text("#state") in ("queued", "scheduled", "running", "completed")
    detail_url = page.url
    page.screenshot(path=str(ARTIFACTS / "experiment-detail.png"))

    other = browser.new_page()  # type: ignore[attr-defined]
    login(other, base, bob.username)
    other.wait_for_url(f"{base}/experiments/")
    assert "browser launched" not in other.content()
    response = other.goto(detail_url)
    assert response.status == 404
    other.screenshot(path=str(ARTIFACTS / "experiment-other-user-404.png"))
