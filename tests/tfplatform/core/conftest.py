from typing import Any

import pytest
from django.test.testcases import QuietWSGIRequestHandler

from tests.tfplatform.core.api_fuzzing import tenants_make


@pytest.fixture
def fuzz_server(live_server: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """live_server, sending each answer at once on a kept-alive connection (api_fuzzing.py's
    Requester). Its handler writes a response's headers and body as two packets; with Nagle's
    algorithm the body waits for the headers' acknowledgment, which the client delays by
    40 ms: more than most of these requests take. A connection per request hid it (closing the
    connection sends what is left)."""
    monkeypatch.setattr(QuietWSGIRequestHandler, "disable_nagle_algorithm", True)
    return live_server


@pytest.fixture
def tenants(fuzz_server: Any) -> dict[str, Any]:
    """A's experiment, model, label, dataset, token and search, and B (api_fuzzing.py)."""
    return tenants_make()
