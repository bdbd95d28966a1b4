"""A real Chromium (Debian's), driven by Playwright, for the web UI tests.

One Chromium per session (per xdist worker): starting it costs more than most tests that use
it. Each test connects its own Playwright to it and its pages get fresh contexts (no cookies,
storage or cache of another test's); what the test opened is closed when it ends."""

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "screenshots"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
]


@pytest.fixture(scope="session")
def chromium_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The DevTools endpoint of the session's Chromium. Started here, not by Playwright: a
    Playwright kept open for the session would leave its event loop running in this thread,
    and Django refuses the ORM in every later test of the session there."""
    if not shutil.which(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium at /usr/bin/chromium (make browser)")
        pytest.skip("Debian's chromium is not installed (make browser)")
    profile = tmp_path_factory.mktemp("chromium")
    process = subprocess.Popen(
        [CHROMIUM, *ARGS, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
         f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    assert process.stderr is not None
    endpoint = ""
    seen = []
    for line in process.stderr:  # it prints the endpoint once it listens
        seen.append(line)
        if found := re.search(r"DevTools listening on (ws://\S+)", line):
            endpoint = found.group(1)
            break
    assert endpoint, "chromium did not start:\n" + "".join(seen[-20:])
    # Its later output is read (and dropped) so that a full pipe never blocks it.
    drain = subprocess.Popen(["cat"], stdin=process.stderr, stdout=subprocess.DEVNULL)
    yield endpoint
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    drain.wait(timeout=20)


@pytest.fixture
def browser(chromium_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls here are sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        instance = playwright.chromium.connect_over_cdp(chromium_endpoint)
        yield instance
        # Closes the contexts this test made (each page of new_page has its own) and
        # disconnects; the session's Chromium goes on for the next test.
        instance.close()
        # The test ran in the context Playwright's loop left current, where Django's
        # connections are not the ones it closes before dropping the test database: closed
        # here, or the session ends on "test_... is being accessed by other users".
        connections_close()


def connections_close() -> None:
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:  # a `db` test's transaction is rolled back later
            connection.close()
