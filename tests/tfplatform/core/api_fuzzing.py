"""What the API fuzz tests share (test_api_fuzz*.py): A's objects for B to aim at, and one
operation fuzzed as B with every check. The fuzz is split over three modules so that the suite's
workers share it: as one module it was the suite's longest unit by minutes."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import (
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode

from tests.factories import (
    DatasetFactory,
    ExperimentFactory,
    ModelVersionFactory,
    RegisteredModelFactory,
    UserFactory,
)
from tfplatform.accounts.tokens import api_token_issue
from tfplatform.searches.services import SearchRequest, search_create

# In everything of A's that B could be shown: names, hyperparameters, paths.
MARKER = "alice-private-7f3a9c"
# Per operation and mode (was 40): this test was among the suite's longest, and the suite must
# stay under 30 minutes on a 2-core machine.
EXAMPLES_PER_OPERATION = 30
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance,
          negative_data_rejection]


def tenants_make() -> dict[str, Any]:
    from tfplatform.modelregistry.models import ModelLabel

    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    experiment = ExperimentFactory(owner=alice, name=f"{MARKER}-experiment",
                                   hyperparameters={"note": MARKER})
    model = RegisteredModelFactory(name=f"{MARKER}-model", owner=alice)
    version = ModelVersionFactory(model=model, version=1, path=f"/models/{MARKER}/1")
    ModelLabel.objects.create(model=model, label="stable", version=version)
    dataset = DatasetFactory(owner=alice, name=f"{MARKER}-dataset",
                             train_uri=f"/srv/{MARKER}/train")
    alices_token, _ = api_token_issue(user=alice, name=f"{MARKER}-token")
    search = search_create(owner=alice, request=SearchRequest(
        name=f"{MARKER}-search", searcher="random", model="mlp", dataset="digits",
        space={"learning_rate": {"low": 0.001, "high": 0.1}}, max_trials=3))
    return {"bob": bob, "alice": alice,
            # What B's requests name to reach A's objects.
            "paths": {"experiment_id": experiment.id, "name": model.name, "version": 1,
                      "label": "stable", "token_id": alices_token.pk,
                      "dataset_id": dataset.pk, "search_id": search.pk}}


def alice_unchanged(tenants: dict[str, Any]) -> tuple[Any, ...]:
    from tfplatform.experiments.models import Experiment
    from tfplatform.modelregistry.models import ModelLabel, ModelVersion

    experiment = Experiment.objects.get(id=tenants["paths"]["experiment_id"])
    return (experiment.name, experiment.state, experiment.hyperparameters,
            list(ModelVersion.objects.filter(model__owner=tenants["alice"]).values_list(
                "version", "state", "path")),
            list(ModelLabel.objects.values_list("label", "version__version")),
            list(tenants["alice"].api_tokens.values_list("pk", "digest")),
            list(tenants["alice"].datasets.values_list("pk", "name", "train_uri")),
            list(tenants["alice"].searches.values_list("pk", "name", "state", "max_trials")),
            list(Experiment.objects.filter(owner=tenants["alice"]).values_list("pk", "state")))


def operation_fuzz(*, operation: Any, mode: GenerationMode, base_url: str, user: Any,
                    path_parameters: dict[str, Any] | None = None) -> list[str]:
    """What went wrong for one operation: each distinct failure once, with its request.
    With `path_parameters` (another user's objects), any success is a failure too."""
    failures: dict[str, str] = {}
    # A token of its own for each request that may change something: it may revoke the token it
    # is sent with. A reading request changes nothing, so the operation's requests share one.
    shared = (api_token_issue(user=user, name="fuzz")[1]
              if operation.method.upper() in ("GET", "HEAD", "OPTIONS") else None)

    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=path_parameters))
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def fuzz(case: Any) -> None:
        token = shared or api_token_issue(user=user, name="fuzz")[1]
        response = case.call(base_url=base_url, headers={"Authorization": f"Token {token}"},
                             timeout=60)
        found: list[BaseException] = []
        try:
            case.validate_response(response, checks=CHECKS)
        except BaseExceptionGroup as group:  # Schemathesis's findings
            found += group.exceptions
        shown = response.text
        for sent in (path_parameters or {}).values():  # B's own words echoed are no leak
            shown = shown.replace(str(sent), "")
        if MARKER in shown:
            found.append(AssertionError("A's data shown to B"))
        if path_parameters and response.status_code < 300:
            found.append(AssertionError(f"B's request on A's objects got {response.status_code}"))
        for error in found:
            summary = " ".join(str(error).split())[:300]
            failures.setdefault(summary, f"{summary}\n    {response.status_code} "
                                         f"{response.text[:300]}\n    {case.as_curl_command()}")

    try:
        fuzz()
    except Unsatisfiable:  # an operation without inputs has nothing to make invalid
        assert mode == GenerationMode.NEGATIVE
    return list(failures.values())




def every_operation_fuzz(*, mode: GenerationMode, base_url: str, user: Any) -> list[str]:
    schema = schemathesis.openapi.from_url(f"{base_url}/api/schema/")
    found: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        found += [f"{operation.method.upper()} {operation.path}: {failure}" for failure in
                  operation_fuzz(operation=operation, mode=mode, base_url=base_url, user=user)]
    return found
