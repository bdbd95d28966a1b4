"""Shared fixtures. Tests use the real database, broker and processes, never mocks of ours."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

ROOT = Path(__file__).resolve().parents[1]
PEER_DATA = ROOT.parent / "shared" / "peer-data"


def peer_data_or_skip() -> Path:
    """Peer data is required in CI; on a developer machine without it the test skips."""
    if PEER_DATA.is_dir():
        return PEER_DATA
    if os.environ.get("CI"):
        pytest.fail(f"CI needs the peer data at {PEER_DATA}")
    pytest.skip(f"peer data not found at {PEER_DATA}")


@pytest.fixture(autouse=True)
def _clear_cache() -> Iterator[None]:
    # Throttle counters live in the cache, checked tokens and model routes in per-process
    # caches; each test starts with a clean slate.
    from tfplatform.accounts.authentication import token_cache_clear
    from tfplatform.modelregistry.selectors import model_route_cache_clear

    for clear in (cache.clear, token_cache_clear, model_route_cache_clear):
        clear()
    yield
    for clear in (cache.clear, token_cache_clear, model_route_cache_clear):
        clear()


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()
