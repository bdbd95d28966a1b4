"""The whole API, fuzzed from its own OpenAPI schema against a live server (Schemathesis): B's
valid requests to every operation while A's experiment, environment, model and deployment exist.
Any 5xx fails, any answer the schema does not describe fails, and any answer to B that carries
A's marker fails: B can read nothing of A. (Invalid requests: test_api_fuzz_negative.py; B aimed
at A's own objects: test_api_fuzz_tenants.py.)
"""

from typing import Any

import pytest
from schemathesis.generation import GenerationMode

from tests.tfplatform.core.api_fuzzing import every_operation_fuzz

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_no_valid_generated_request_fails_or_leaks_another_users_data(
    fuzz_server: Any, tenants: dict[str, Any]
) -> None:
    found = every_operation_fuzz(mode=GenerationMode.POSITIVE, base_url=fuzz_server.url,
                                 user=tenants["bob"])
    assert not found, "\n".join(found)
