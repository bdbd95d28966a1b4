"""Searching experiments: every filter's answer is the one Python computes over what the user
may see, on 200 experiments of three teams (and of users without one)."""

import random
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import (
    EnvironmentFactory,
    ExperimentFactory,
    MetricFactory,
    TeamFactory,
    TrialFactory,
    UserFactory,
)
from tfplatform.core.conditions import condition_parse
from tfplatform.experiments.models import Experiment, ExperimentTag
from training.target import mode_infer

pytestmark = pytest.mark.django_db

WORDS = ["baseline", "resnet", "sweep", "augment", "dropout", "warmup", "cosine", "mixup"]
TAGS = ["baseline", "lr-sweep", "prod", "team/vision", "v1.2", "ablation"]
METRICS = ("val_accuracy", "val_loss")


def _build(rng: random.Random) -> dict[str, Any]:
    teams = [TeamFactory(name=f"team-{name}") for name in ("a", "b", "c")]
    users = [UserFactory(team=team) for team in teams for _ in range(2)] + [UserFactory()]
    environments = [EnvironmentFactory(name="tf-cpu"), EnvironmentFactory(name="tf-gpu")]
    start = timezone.now() - timedelta(days=10)
    expected: dict[int, dict[str, Any]] = {}
    for index in range(200):
        owner = rng.choice(users)
        hyperparameters: dict[str, Any] = {"epochs": rng.randint(1, 5),
                                           "batch_size": rng.choice([16, 32, 64])}
        if rng.random() < 0.8:
            hyperparameters["lr"] = rng.choice([0.0001, 0.001, 0.003, 0.01, 0.03, 0.1, "auto"])
        if rng.random() < 0.7:
            hyperparameters["optimizer"] = rng.choice(["adam", "sgd"])
        if rng.random() < 0.5:
            hyperparameters["augment"] = rng.random() < 0.5
        words = rng.sample(WORDS, 2)
        experiment = ExperimentFactory(
            owner=owner, name=f"{words[0]}-{index}",
            note=f"Tried **{words[1]}** on this one." if rng.random() < 0.6 else "",
            state=rng.choice(Experiment.State.values), archived=rng.random() < 0.15,
            dataset=rng.choice(["digits", "cifar", "mnist"]), dataset_version_number=rng.choice(
                [None, 1, 2]),
            model=rng.choice(["mlp", "cnn", "resnet"]),
            environment=rng.choice(environments), hyperparameters=hyperparameters,
            priority=rng.randint(0, 3),
        )
        Experiment.objects.filter(pk=experiment.pk).update(
            created_at=start + timedelta(minutes=index))
        tags = rng.sample(TAGS, rng.randint(0, 3))
        ExperimentTag.objects.bulk_create(
            [ExperimentTag(experiment=experiment, name=tag) for tag in tags])
        series: dict[str, list[float]] = {name: [] for name in METRICS}
        at = start + timedelta(minutes=index)
        for restart in range(rng.randint(0, 2)):
            trial = TrialFactory(experiment=experiment, restart_count=restart)
            for epoch in range(1, rng.randint(1, 4)):
                at += timedelta(seconds=1)
                for name in METRICS:
                    value = round(rng.random(), 3)
                    MetricFactory(trial=trial, name=name, epoch=epoch, value=value,
                                  recorded_at=at)
                    series[name].append(value)
                # Not an epoch's value: never final nor best.
                MetricFactory(trial=trial, name="val_accuracy", epoch=None, value=2.0,
                              recorded_at=at)
        expected[experiment.pk] = {
            "experiment": experiment, "tags": set(tags), "hp": hyperparameters,
            "final": {n: v[-1] for n, v in series.items() if v},
            "best": {n: (max(v) if mode_infer(metric=n) == "max" else min(v))
                     for n, v in series.items() if v},
        }
    return {"teams": teams, "users": users, "expected": expected}


def _visible(user: Any, rows: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {pk: row for pk, row in rows.items()
            if user.is_staff or row["experiment"].owner_id == user.pk
            or (user.team_id is not None and row["experiment"].team_id == user.team_id)}


def _ids(client: APIClient, params: list[tuple[str, str]]) -> tuple[list[int], int]:
    response = client.get(f"/api/v1/experiments/?{urlencode([*params, ('limit', '500')])}")
    assert response.status_code == 200, response.json()
    body = response.json()
    return [row["id"] for row in body["results"]], body["count"]


def _holds(row: dict[str, Any], params: list[tuple[str, str]]) -> bool:
    experiment = row["experiment"]
    archived = dict(params).get("archived", "false")
    if archived != "any" and experiment.archived != (archived == "true"):
        return False
    for key, value in params:
        if key == "q" and not all(
                word.lower() in experiment.name.lower() or word.lower() in experiment.note.lower()
                or any(word.lower() in tag.lower() for tag in row["tags"])
                for word in value.split()):
            return False
        if key == "tag" and value not in row["tags"]:
            return False
        if key == "owner" and experiment.owner.username != value:
            return False
        if key == "team" and (experiment.team is None or experiment.team.name != value):
            return False
        if key == "state" and experiment.state not in value.split(","):
            return False
        if key == "dataset" and "@" in value:
            name, version = value.split("@")
            if (experiment.dataset, experiment.dataset_version_number) != (name, int(version)):
                return False
        elif key in ("dataset", "model") and getattr(experiment, key) != value:
            return False
        if key == "environment" and experiment.environment.name != value:
            return False
        if key in ("hp", "final", "best"):
            condition = condition_parse(text=value, field=key, numbers_only=key != "hp")
            source = row["hp"] if key == "hp" else row[key]
            if not condition.holds(source.get(condition.name)):
                return False
    return True


CASES: list[list[tuple[str, str]]] = [
    [],
    [("archived", "true")],
    [("archived", "any")],
    [("q", "sweep")],
    [("q", "resnet warmup")],
    [("q", "TEAM/VIS")],
    [("tag", "prod")],
    [("tag", "prod"), ("tag", "baseline")],
    [("owner", "__owner__")],
    [("team", "team-b")],
    [("team", "team-a")],
    [("state", "completed")],
    [("state", "queued,running"), ("archived", "any")],
    [("dataset", "cifar"), ("model", "cnn")],
    [("environment", "tf-gpu")],
    [("dataset", "cifar@2")],
    [("hp", "lr<0.01")],
    [("hp", "lr>=0.001"), ("hp", "lr<0.05")],
    [("hp", "lr=auto")],
    [("hp", "optimizer=adam")],
    [("hp", "optimizer!=adam")],
    [("hp", "augment=true")],
    [("hp", "batch_size>16"), ("hp", "epochs<=2")],
    [("final", "val_accuracy>=0.5")],
    [("best", "val_accuracy>=0.9")],
    [("best", "val_loss<0.2"), ("dataset", "digits")],
    [("final", "val_loss>0.5"), ("hp", "lr<0.01"), ("tag", "lr-sweep"), ("archived", "any")],
]


def test_every_filter_answers_what_python_computes_over_the_visible_set() -> None:
    built = _build(random.Random(45))
    staff = UserFactory(is_staff=True)
    viewers = [built["users"][0], built["users"][-1], staff]
    narrowed = 0
    for viewer in viewers:
        client = APIClient()
        client.force_authenticate(user=viewer)
        visible = _visible(viewer, built["expected"])
        for case in CASES:
            params = [(k, built["users"][2].username if v == "__owner__" else v)
                      for k, v in case]
            ids, count = _ids(client, params)
            wanted = {pk for pk, row in visible.items() if _holds(row, params)}
            assert set(ids) == wanted, (viewer.username, params)
            assert count == len(wanted) and len(ids) == len(set(ids))
            narrowed += 0 < len(wanted) < len(visible)
    # The fixture is varied enough that the cases test something: most answers are neither
    # empty nor everything.
    assert narrowed >= 0.8 * len(CASES) * len(viewers)
    # The viewer in team a meets no other team's runs, whatever it asks for.
    client = APIClient()
    client.force_authenticate(user=viewers[0])
    ids, _ = _ids(client, [("team", "team-b"), ("archived", "any")])
    assert ids == []


@pytest.mark.parametrize("ordering", ["-best.val_accuracy", "final.val_loss", "-hp.lr", "name"])
def test_ordering_by_any_metric_puts_missing_values_last(ordering: str) -> None:
    built = _build(random.Random(7))
    viewer = built["users"][0]
    client = APIClient()
    client.force_authenticate(user=viewer)
    ids, _ = _ids(client, [("ordering", ordering)])
    rows = built["expected"]
    field = ordering.removeprefix("-")
    kind, _, name = field.partition(".")

    def key(pk: int) -> Any:
        if not name:
            return rows[pk]["experiment"].name
        value = rows[pk]["hp" if kind == "hp" else kind].get(name)
        return value if isinstance(value, float) else None

    present = [key(pk) for pk in ids if key(pk) is not None]
    assert present == sorted(present, reverse=ordering.startswith("-"))
    missing = [pk for pk in ids if key(pk) is None]
    assert ids[len(present):] == missing


@pytest.mark.parametrize("query", [
    "hp=lr", "hp=lr<<1", "hp=lr%3Cabc", "final=val_loss%3Dlow", "state=", "state=done",
    "ordering=secret", "ordering=best.", "archived=maybe", "hp=" + "x" * 500,
    "hp=na%22me%3D1", "tag=" + "t" * 65,
])
def test_a_malformed_filter_is_a_field_error(query: str) -> None:
    client = APIClient()
    client.force_authenticate(user=UserFactory())
    response = client.get(f"/api/v1/experiments/?{query}")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_input"


def test_tag_counts_count_only_what_the_user_can_see() -> None:
    mine, theirs = TeamFactory(), TeamFactory()
    me, them = UserFactory(team=mine), UserFactory(team=theirs)
    for owner, tags in ((me, ["prod", "baseline"]), (me, ["prod"]), (them, ["prod", "secret"])):
        experiment = ExperimentFactory(owner=owner)
        ExperimentTag.objects.bulk_create(
            [ExperimentTag(experiment=experiment, name=tag) for tag in tags])
    client = APIClient()
    client.force_authenticate(user=me)
    assert client.get("/api/v1/experiments/tags/").json() == [
        {"name": "prod", "count": 2}, {"name": "baseline", "count": 1}]
