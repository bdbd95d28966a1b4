"""Dataset versions: registering a name again makes its next version, with a fingerprint of its
files; an experiment pins the newest or the one it names; a deleted version keeps its number."""

import os
from pathlib import Path
from typing import Any

import pytest

from tests.factories import TeamFactory, UserFactory
from tests.tfplatform.datasets.test_dataset_registry import (  # noqa: F401
    _client,
    _home,
    _parquet,
    _register,
    root,
)
from tfplatform.core.errors import InvalidInput
from tfplatform.datasets.fingerprints import dataset_fingerprint_now
from tfplatform.datasets.models import Dataset
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services.execution import trial_spec_build
from tfplatform.experiments.services.submission import ExperimentRequest, experiment_create
from tfplatform.searches.models import Search

pytestmark = pytest.mark.django_db


def _fields(folder: Path) -> dict[str, Any]:
    return {"name": "clicks", "format": "parquet", "train": str(folder),
            "validation": str(folder), "label": "label"}


def _submit(user: Any, dataset: str) -> Any:
    return _client(user).post("/api/v1/experiments/", {
        "name": "pinned", "model": "mlp", "dataset": dataset,
        "hyperparameters": {"epochs": 1}}, format="json")


def _source_of(experiment_id: int) -> dict[str, Any]:
    """What its next trial would read."""
    experiment = Experiment.objects.get(pk=experiment_id)
    trial = Trial.objects.create(experiment=experiment,
                                 restart_count=experiment.trials.count())
    return trial_spec_build(trial=trial).dataset_source


def test_registering_a_name_again_makes_versions_1_and_2_each_with_its_fingerprint(
    root: Path,  # noqa: F811
) -> None:
    team = TeamFactory()
    alice, mate = UserFactory(team=team), UserFactory(team=team)
    monday = _parquet(root / team.name / "monday")
    tuesday = _parquet(root / team.name / "tuesday", files=3)

    first = _register(alice, **_fields(monday))
    second = _register(mate, **_fields(tuesday))

    assert (first.status_code, second.status_code) == (201, 201)
    assert (first.json()["version"], second.json()["version"]) == (1, 2)
    assert first.json()["fingerprint"] != second.json()["fingerprint"]
    assert len(first.json()["fingerprint"]) == 64
    listed = _client(alice).get("/api/v1/datasets/").json()["results"]
    assert [(d["name"], d["version"]) for d in listed] == [("clicks", 1), ("clicks", 2)]
    older = _client(mate).get(f"/api/v1/datasets/{first.json()['id']}/").json()
    assert older["train"] == str(monday)  # older versions stay readable
    # The same files registered again: a new version, the same fingerprint.
    third = _register(alice, **_fields(monday)).json()
    assert third["version"] == 3 and third["fingerprint"] == first.json()["fingerprint"]


def test_an_experiment_pins_the_newest_version_or_the_one_it_names(
    root: Path,  # noqa: F811
) -> None:
    alice, bob = UserFactory(), UserFactory()
    monday = _parquet(_home(root, alice) / "monday")
    tuesday = _parquet(_home(root, alice) / "tuesday")
    _register(alice, **_fields(monday))
    v2 = _register(alice, **_fields(tuesday)).json()

    newest = _submit(alice, "clicks")
    named = _submit(alice, "clicks@1")
    assert (newest.status_code, named.status_code) == (201, 201), named.json()
    client = _client(alice)
    shown = client.get(f"/api/v1/experiments/{newest.json()['id']}/").json()
    assert shown["dataset"] == "clicks" and shown["dataset_version"] == 2
    assert shown["dataset_fingerprint"] == v2["fingerprint"]
    assert client.get(f"/api/v1/experiments/{named.json()['id']}/").json()[
        "dataset_version"] == 1
    assert _source_of(newest.json()["id"])["train"] == str(tuesday)
    assert _source_of(named.json()["id"])["train"] == str(monday)

    # A third version registered meanwhile changes nothing for those already submitted.
    _register(alice, **_fields(_parquet(_home(root, alice) / "wednesday")))
    assert _source_of(newest.json()["id"])["train"] == str(tuesday)

    missing = _submit(alice, "clicks@9")
    assert missing.status_code == 400
    assert missing.json()["dataset"] == ["Dataset 'clicks' has no version 9; its versions: "
                                         "1, 2, 3."]
    for bad in ("clicks@", "clicks@0", "clicks@two", "clicks@1@2"):
        assert _submit(alice, bad).status_code == 400, bad
    assert _submit(bob, "clicks@1").status_code == 400  # not theirs to see


def test_a_deleted_version_keeps_its_number_and_the_experiments_that_pinned_it(
    root: Path,  # noqa: F811
) -> None:
    alice = UserFactory()
    monday = _parquet(_home(root, alice) / "monday")
    _register(alice, **_fields(monday))
    v2 = _register(alice, **_fields(monday)).json()
    pinned = _submit(alice, "clicks").json()["id"]

    assert _client(alice).delete(f"/api/v1/datasets/{v2['id']}/").status_code == 204

    assert _client(alice).get(f"/api/v1/datasets/{v2['id']}/").status_code == 404
    assert _register(alice, **_fields(monday)).json()["version"] == 3  # never 2 again
    assert Experiment.objects.get(pk=pinned).dataset_version_number == 2
    with pytest.raises(InvalidInput, match="'clicks' version 2 is no longer registered"):
        _source_of(pinned)
    assert _client(alice).get(f"/api/v1/experiments/{pinned}/").json()["dataset_version"] == 2


def test_the_fingerprint_follows_the_files_names_sizes_and_times(
    root: Path,  # noqa: F811
) -> None:
    alice = UserFactory()
    folder = _parquet(_home(root, alice) / "monday")
    version = Dataset.objects.get(pk=_register(alice, **_fields(folder)).json()["id"])
    assert dataset_fingerprint_now(dataset=version) == version.fingerprint

    shard = folder / "part-1.parquet"
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 1))
    touched = dataset_fingerprint_now(dataset=version)
    assert touched != version.fingerprint
    (folder / "part-2.parquet").write_bytes(shard.read_bytes())
    assert dataset_fingerprint_now(dataset=version) not in (touched, version.fingerprint)


def test_a_searchs_trials_all_read_the_version_newest_at_its_submission(
    root: Path,  # noqa: F811
) -> None:
    alice = UserFactory()
    _register(alice, **_fields(_parquet(_home(root, alice) / "monday")))
    space = {"learning_rate": {"values": [0.01, 0.02, 0.03]}}
    response = _client(alice).post("/api/v1/searches/", {
        "name": "sweep", "model": "mlp", "dataset": "clicks", "searcher": "grid",
        "space": space, "max_concurrent": 1, "hyperparameters": {"epochs": 1}}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["dataset"] == "clicks@1"
    _register(alice, **_fields(_parquet(_home(root, alice) / "tuesday")))

    search = Search.objects.get(pk=response.json()["id"])
    experiment = experiment_create(owner=alice, request=ExperimentRequest(
        name="next trial", model=search.model, dataset=search.dataset))
    assert (experiment.dataset, experiment.dataset_version_number) == ("clicks", 1)
