"""A real Chromium (Debian's), driven by Playwright, for the web UI tests."""

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "screenshots"


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium at /usr/bin/chromium (make browser)")
        pytest.skip("Debian's chromium is not installed (make browser)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls here are sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield instance
        instance.close()
