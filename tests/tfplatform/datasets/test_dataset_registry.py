"""Registering sharded datasets: only inside the dataset roots, visible to owner, team, staff."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rest_framework.test import APIClient

from tests.factories import DatasetFactory, ExperimentFactory, TeamFactory, UserFactory
from tfplatform.datasets.models import Dataset
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services.execution import trial_spec_build
from training.sandbox import trial_paths

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(tmp_path: Path, settings: Any) -> Path:
    folder = tmp_path / "roots" / "data"
    folder.mkdir(parents=True)
    settings.PLATFORM = {**settings.PLATFORM, "DATASET_ROOTS": [folder]}
    return folder


def _parquet(folder: Path, *, files: int = 2, rows: int = 5) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    for index in range(files):
        pq.write_table(pa.table({
            "x1": np.arange(rows, dtype=np.float64), "x2": np.ones(rows, dtype=np.float32),
            "label": (np.arange(rows) + index) % 4}), folder / f"part-{index}.parquet")
    return folder


def _client(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _register(user: Any, **fields: Any) -> Any:
    return _client(user).post("/api/v1/datasets/", fields, format="json")


def test_parquet_schema_counts_and_classes_come_from_the_footers(root: Path) -> None:
    train, validation = _parquet(root / "train"), _parquet(root / "validation", files=1)
    (train / "_SUCCESS").touch()
    response = _register(UserFactory(), name="tabular", format="parquet", train=str(train),
                         validation=str(validation), label="label", pack=True)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["features"] == {"x1": {"dtype": "float64", "shape": []},
                                "x2": {"dtype": "float32", "shape": []}}
    assert body["label_spec"] == {"dtype": "int64", "shape": []}
    assert (body["train_examples"], body["validation_examples"], body["num_classes"]) == (10, 5, 4)
    assert body["size_bytes"] == sum(p.stat().st_size for p in [*train.glob("*.parquet"),
                                                                *validation.iterdir()])


@pytest.mark.parametrize("where", ["/etc", "uploads", "var", "link", "shard-link", "missing"])
def test_nothing_outside_the_dataset_roots_can_be_registered(
    where: str, root: Path, settings: Any, tmp_path: Path
) -> None:
    uploads = tmp_path / "roots" / "uploads"  # another tenant's files, beside the root
    _parquet(uploads)
    settings.MEDIA_ROOT = uploads
    uri = {"/etc": "/etc", "uploads": str(uploads), "var": str(settings.VAR_DIR),
           "missing": str(root / "nothing")}.get(where, "")
    if where == "link":  # a link inside the root to a folder outside it
        os.symlink(uploads, root / "escape")
        uri = str(root / "escape")
    if where == "shard-link":  # one shard of an allowed folder pointing outside
        folder = _parquet(root / "mixed")
        os.symlink(uploads / "part-0.parquet", folder / "part-9.parquet")
        uri = str(folder)
    response = _register(UserFactory(), name="sneaky", format="parquet", train=uri,
                         validation=uri, label="label")
    assert response.status_code == 400
    assert any(word in str(response.json()) for word in
               ("not inside the dataset roots", "leads out of", "does not exist"))
    assert not Dataset.objects.exists()


def test_a_root_set_too_wide_still_keeps_the_platforms_own_folders_out(
    root: Path, settings: Any
) -> None:
    media = root / "uploads"
    _parquet(media / "datasets")
    settings.MEDIA_ROOT = media
    response = _register(UserFactory(), name="uploads", format="parquet",
                         train=str(media / "datasets"), validation=str(media / "datasets"),
                         label="label")
    assert response.status_code == 400 and "dataset roots" in response.json()["train"][0]


def test_tfrecord_needs_its_feature_spec_and_counts(root: Path) -> None:
    folder = root / "records"
    folder.mkdir()
    (folder / "part-00000").write_bytes(b"")
    base = {"name": "records", "format": "tfrecord", "train": str(folder),
            "validation": str(folder), "label": "label"}
    response = _register(UserFactory(), **base)
    assert response.status_code == 400 and "features" in response.json()
    response = _register(UserFactory(), **base, train_examples=10, validation_examples=2,
                         features={"x": {"dtype": "float32", "shape": [4]}},
                         label_spec={"dtype": "int64", "shape": []}, num_classes=3)
    assert response.status_code == 201, response.json()
    assert response.json()["features"] == {"x": {"dtype": "float32", "shape": [4]}}


def test_csv_columns_come_from_the_header(root: Path) -> None:
    folder = root / "csv"
    folder.mkdir()
    for index in range(2):
        (folder / f"part-{index}.csv").write_text("f1,f2,target\n1,2,0\n3,4,1\n")
    response = _register(UserFactory(), name="csv", format="csv", train=str(folder),
                         validation=str(folder / "part-1.csv"), label="target", num_classes=2,
                         train_examples=4, validation_examples=2)
    assert response.status_code == 201, response.json()
    assert response.json()["csv_columns"] == ["f1", "f2", "target"]
    assert response.json()["label_spec"] == {"dtype": "int64", "shape": []}


def test_s3_without_the_plugins_is_refused_plainly(root: Path) -> None:
    response = _register(UserFactory(), name="remote", format="parquet", train="s3://b/train",
                         validation="s3://b/validation", label="label", train_examples=1,
                         validation_examples=1, features={"x": {"dtype": "float32", "shape": []}},
                         label_spec={"dtype": "float32", "shape": []})
    assert response.status_code == 400
    assert "needs the tensorflow-io filesystem plugins" in response.json()["train"][0]


def test_only_owner_team_and_staff_see_or_delete_a_dataset() -> None:
    team = TeamFactory()
    alice, teammate, bob = UserFactory(team=team), UserFactory(team=team), UserFactory()
    staff = UserFactory(is_staff=True)
    dataset = DatasetFactory(owner=alice)
    url = f"/api/v1/datasets/{dataset.pk}/"
    assert _client(bob).get(url).status_code == 404
    assert _client(bob).delete(url).status_code == 404
    assert _client(bob).get("/api/v1/datasets/").json()["results"] == []
    assert _client(teammate).get(url).json()["name"] == dataset.name
    assert _client(staff).get(url).status_code == 200
    assert _client(teammate).delete(url).status_code == 204
    assert not Dataset.objects.exists()


def test_a_name_is_unique_in_a_team_and_built_in_names_are_taken(root: Path) -> None:
    team = TeamFactory()
    folder = _parquet(root / "t")
    fields = {"format": "parquet", "train": str(folder), "validation": str(folder),
              "label": "label"}
    assert _register(UserFactory(team=team), name="shared", **fields).status_code == 201
    again = _register(UserFactory(team=team), name="shared", **fields)
    assert again.status_code == 409 and again.json()["code"] == "conflict"
    assert _register(UserFactory(), name="shared", **fields).status_code == 201  # no team
    assert _register(UserFactory(), name="digits", **fields).status_code == 400


def test_an_experiment_on_a_registered_dataset_carries_its_source_to_the_trial(
    root: Path
) -> None:
    owner = UserFactory()
    folder = _parquet(root / "exp")
    assert _register(owner, name="mine", format="parquet", train=str(folder),
                     validation=str(folder), label="label", pack=True).status_code == 201
    submit = {"name": "on-shards", "model": "mlp", "dataset": "mine",
              "hyperparameters": {"epochs": 1}}
    assert _client(UserFactory()).post("/api/v1/experiments/", submit,
                                       format="json").status_code == 400  # not theirs
    response = _client(owner).post("/api/v1/experiments/", submit, format="json")
    assert response.status_code == 201, response.json()
    trial = Trial.objects.create(experiment=Experiment.objects.get(pk=response.json()["id"]))
    spec = trial_spec_build(trial=trial)
    assert spec.dataset == "mine" and spec.dataset_source["train"] == str(folder)
    assert spec.dataset_source["feature_order"] == ["x1", "x2"]
    assert str(folder) in trial_paths(spec=spec)[1]  # shown to the trial, read-only
    with_servers = {**submit, "resources": {"workers": 2, "parameter_servers": 1}}
    refused = _client(owner).post("/api/v1/experiments/", with_servers, format="json")
    assert refused.status_code == 400 and "parameter-server" in refused.json()["dataset"][0]


def test_a_job_that_reads_no_dataset_looks_none_up() -> None:
    for experiment in (ExperimentFactory(model="pi", dataset=""),
                       ExperimentFactory(model="pi", dataset="digits")):
        trial = Trial.objects.create(experiment=experiment)
        assert trial_spec_build(trial=trial).dataset_source == {}
