"""What the API fuzz tests share (test_api_fuzz*.py): A's objects for B to aim at, and one
operation fuzzed as B with every check. The fuzz is split over three modules so that the suite's
workers share it: as one module it was the suite's longest unit by minutes."""

from __future__ import annotations

from typing import Any, cast

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import (
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi._hypothesis import _draw_negated_locations
from schemathesis.transport.requests import ManagedCookiesSession

from tests.factories import (
    DatasetFactory,
    ExperimentFactory,
    ModelVersionFactory,
    RegisteredModelFactory,
    UserFactory,
)
from tfplatform.accounts.models import ApiToken
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


class Requester:
    """B's requests, sent as `user` with a token of theirs.

    One keep-alive HTTP session for all of them: the live server's threaded server starts a
    thread, and that thread a database connection, per HTTP connection, and these were most of
    a request's time when every request opened its own. Cookies a response sets are dropped
    before the next request (ManagedCookiesSession), as when each had a session of its own.

    One token until a request revokes it (revoking a token, signing out, a new password): then
    the next request gets a new one. Issuing one per request (its row and an audit row, in a
    transaction) cost more than most requests did."""

    def __init__(self, *, base_url: str, user: Any) -> None:
        self.base_url, self.user = base_url, user
        self.session = ManagedCookiesSession()
        # Schemathesis's own headers (its User-Agent): a session's would replace them.
        self.session.headers.clear()
        self.session.trust_env = False  # no proxy or .netrc look-up per request: a local server
        self.token, self.key = api_token_issue(user=user, name="fuzz")

    def __enter__(self) -> Requester:
        return self

    def __exit__(self, *exc_info: object) -> None:
        # The server's thread for the connection ends, and closes its database connection.
        self.session.close()

    def send(self, case: Any) -> Any:
        response = case.call(base_url=self.base_url, session=self.session,
                             headers={"Authorization": f"Token {self.key}"}, timeout=60)
        if (case.method.upper() not in ("GET", "HEAD", "OPTIONS")
                and not ApiToken.objects.filter(pk=self.token.pk).exists()):
            self.token, self.key = api_token_issue(user=self.user, name="fuzz")
        return response


def nothing_to_negate(operation: Any) -> bool:
    """Whether the operation has no parameter or body that an invalid value exists for (no
    parameters, string path parameters, bodies any JSON fits): negative mode then generates
    nothing, and Hypothesis would spend some 460 rejected draws (a second or two of CPU) to
    find that out. Schemathesis's own choice of what a negative case breaks, with no choice
    made: it returns None only where there is nothing to choose from."""
    return _draw_negated_locations(
        cast(Any, lambda _strategy: None), operation, GenerationMode.NEGATIVE,
        explicit=dict.fromkeys((ParameterLocation.PATH, ParameterLocation.HEADER,
                                ParameterLocation.COOKIE, ParameterLocation.QUERY)),
        body_is_generated=True) is None


def operation_fuzz(*, operation: Any, mode: GenerationMode, requester: Requester,
                   path_parameters: dict[str, Any] | None = None) -> list[str]:
    """What went wrong for one operation: each distinct failure once, with its request.
    With `path_parameters` (another user's objects), any success is a failure too."""
    failures: dict[str, str] = {}
    if mode == GenerationMode.NEGATIVE and nothing_to_negate(operation):
        return []

    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=path_parameters))
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def fuzz(case: Any) -> None:
        response = requester.send(case)
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
    with Requester(base_url=base_url, user=user) as requester:
        for result in schema.get_all_operations():
            operation = result.ok()
            found += [f"{operation.method.upper()} {operation.path}: {failure}" for failure in
                      operation_fuzz(operation=operation, mode=mode, requester=requester)]
    return found
