"""Metrics and logs answers stay bounded however long a run was: each series thinned to evenly
spaced points (its first and last kept), logs capped, and every query number checked."""

import itertools
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import MetricFactory, TrialFactory
from tfplatform.experiments.models import Metric
from tfplatform.experiments.selectors.experiments import LOGS_MAX_CHARS, METRIC_POINTS_DEFAULT

pytestmark = pytest.mark.django_db


@pytest.fixture
def long_run() -> Any:
    trial = TrialFactory()
    Metric.objects.bulk_create(MetricFactory.build_batch(5_000, trial=trial, name="loss"))
    Metric.objects.bulk_create(MetricFactory.build_batch(10, trial=trial, name="accuracy"))
    client = APIClient()
    client.force_authenticate(trial.experiment.owner)
    return client, f"/api/v1/experiments/{trial.experiment.id}"


def _series(points: list[dict[str, Any]], name: str) -> list[int]:
    return [p["step"] for p in points if p["name"] == name]


def test_a_long_series_is_thinned_evenly_and_keeps_its_ends(long_run: Any) -> None:
    client, path = long_run
    loss = Metric.objects.filter(name="loss").order_by("recorded_at", "id")
    first, last = loss.first(), loss.last()
    assert first is not None and last is not None
    points = client.get(f"{path}/metrics/", {"max_points": 100}).json()
    steps = _series(points, "loss")
    assert 100 <= len(steps) <= 101
    assert steps[0] == first.step and steps[-1] == last.step
    gaps = {b - a for a, b in itertools.pairwise(steps[:-1])}
    assert gaps == {50}  # evenly spaced
    assert len(_series(points, "accuracy")) == 10  # a short series is left whole


def test_by_default_an_answer_holds_a_bounded_number_of_points(long_run: Any) -> None:
    client, path = long_run
    points = client.get(f"{path}/metrics/", {"name": "loss"}).json()
    assert len(points) <= METRIC_POINTS_DEFAULT + 1
    assert {p["name"] for p in points} == {"loss"}


@pytest.mark.parametrize("query", [{"max_points": "1"}, {"max_points": "many"},
                                   {"max_points": "10000000"}, {"name": "x" * 101}])
def test_metrics_query_numbers_are_checked(long_run: Any, query: dict[str, str]) -> None:
    client, path = long_run
    answer = client.get(f"{path}/metrics/", query)
    assert answer.status_code == 400 and answer.json()["error"]


@pytest.mark.parametrize("tail", ["0", "-1", "ten", "1000001"])
def test_logs_tail_is_checked(long_run: Any, tail: str) -> None:
    client, path = long_run
    answer = client.get(f"{path}/logs/", {"tail": tail})
    assert answer.status_code == 400 and answer.json()["tail"]


def test_logs_of_many_restarts_are_capped(long_run: Any) -> None:
    client, path = long_run
    experiment_id = int(path.rsplit("/", 1)[1])
    for _ in range(12):
        TrialFactory(experiment_id=experiment_id, logs="x" * 200_000)
    logs = client.get(f"{path}/logs/").json()["logs"]
    assert len(logs) <= LOGS_MAX_CHARS + 100
    assert logs.startswith("[earlier output cut]")
    assert client.get(f"{path}/logs/", {"tail": "2"}).json()["logs"].count("\n") == 1
