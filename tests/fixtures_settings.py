"""The one way tests change the platform's settings (a pytest plugin, see tests/conftest.py)."""

import dataclasses
from typing import Any, Protocol

import pytest

from tfplatform.config.platform_settings import PlatformSettings


class PlatformSettingsOverride(Protocol):
    def __call__(self, **changes: Any) -> PlatformSettings: ...


@pytest.fixture
def platform_settings_override(settings: Any) -> PlatformSettingsOverride:
    """`platform_settings_override(work_dir=path, ...)`: `settings.PLATFORM` with those fields
    changed until the test ends (a field that does not exist is a TypeError); calls add up.

    Through pytest-django's `settings` (django's override_settings), so this and any other
    setting a test changes are undone together, in reverse order."""

    def override(**changes: Any) -> PlatformSettings:
        settings.PLATFORM = dataclasses.replace(settings.PLATFORM, **changes)
        changed: PlatformSettings = settings.PLATFORM
        return changed

    return override


# Longer than any test takes, and than a step of the wall clock (this machine is a VM that is
# paused and resumed): a node a factory made stays online for its test, however long the test or
# the step. Tests of loss age a heartbeat by an hour, or set their own threshold. Worker nodes
# and schedulers the tests start as processes read their own environment, not this.
TEST_NODE_LOST_SECONDS = 1800.0


@pytest.fixture(autouse=True)
def _factory_nodes_stay_online(platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(node_lost_seconds=TEST_NODE_LOST_SECONDS)
