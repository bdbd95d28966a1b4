"""B's generated requests aimed at A's own objects (test_api_fuzz.py's fuzz, with A's ids in
every path): each is refused, shows nothing of A's and changes nothing of A's."""

from typing import Any

import pytest
import schemathesis
from schemathesis.generation import GenerationMode

from tests.tfplatform.core.api_fuzzing import Requester, alice_unchanged, operation_fuzz

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_b_can_neither_read_nor_change_what_a_owns(
    fuzz_server: Any, tenants: dict[str, Any]
) -> None:
    """Every operation on a path, aimed at A's own experiment, model, version and label."""
    schema = schemathesis.openapi.from_url(f"{fuzz_server.url}/api/schema/")
    before = alice_unchanged(tenants)
    found: list[str] = []
    aimed = 0
    with Requester(base_url=fuzz_server.url, user=tenants["bob"]) as requester:
        for result in schema.get_all_operations():
            operation = result.ok()
            names = {p.name for p in operation.path_parameters}
            ours = {k: v for k, v in tenants["paths"].items() if k in names}
            if not ours:
                continue
            aimed += 1
            found += [f"{operation.method.upper()} {operation.path}: {failure}" for failure in
                      operation_fuzz(operation=operation, mode=GenerationMode.POSITIVE,
                                     requester=requester, path_parameters=ours)]
    assert aimed >= 16  # every experiment, model and search operation
    assert not found, "\n".join(found)
    assert alice_unchanged(tenants) == before
