"""The whole API fuzzed with invalid requests (test_api_fuzz.py's, negative mode): each is
refused with a 4xx the schema lists, never a 5xx, and nothing of A's is shown to B."""

from typing import Any

import pytest
from schemathesis.generation import GenerationMode

from tests.tfplatform.core.api_fuzzing import every_operation_fuzz

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_no_invalid_generated_request_fails_or_leaks_another_users_data(
    fuzz_server: Any, tenants: dict[str, Any]
) -> None:
    found = every_operation_fuzz(mode=GenerationMode.NEGATIVE, base_url=fuzz_server.url,
                                 user=tenants["bob"])
    assert not found, "\n".join(found)
