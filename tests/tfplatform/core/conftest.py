from typing import Any

import pytest

from tests.tfplatform.core.api_fuzzing import tenants_make


@pytest.fixture
def tenants(live_server: Any) -> dict[str, Any]:
    """A's experiment, model, label, dataset, token and search, and B (api_fuzzing.py)."""
    return tenants_make()
