"""Registering sharded datasets: only in the holder's folder of a dataset root, never the
platform's own files; visible to owner, team, staff."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rest_framework.test import APIClient

from tests.factories import (
    DatasetFactory,
    DeviceFactory,
    ExperimentFactory,
    NodeFactory,
    TeamFactory,
    UserFactory,
)
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.core.errors import InvalidInput
from tfplatform.datasets.models import Dataset
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services.execution import trial_execute, trial_spec_build
from tfplatform.experiments.services.scheduling import scheduler_pass
from training.errors import InvalidInput as TrainingInvalidInput
from training.isolation.sandbox import trial_paths

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(tmp_path: Path, settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> Path:
    folder = tmp_path / "roots" / "data"
    folder.mkdir(parents=True)
    platform_settings_override(dataset_roots=[folder])
    return folder


def _home(root: Path, user: Any) -> Path:
    """A teamless user's folder of the root."""
    return root / "users" / user.username


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
    user = UserFactory()
    train = _parquet(_home(root, user) / "train")
    validation = _parquet(_home(root, user) / "validation", files=1)
    (train / "_SUCCESS").touch()
    response = _register(user, name="tabular", format="parquet", train=str(train),
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
    user = UserFactory()
    home = _home(root, user)
    home.mkdir(parents=True)
    uploads = tmp_path / "roots" / "uploads"  # another tenant's files, beside the root
    _parquet(uploads)
    settings.MEDIA_ROOT = uploads
    uri = {"/etc": "/etc", "uploads": str(uploads), "var": str(settings.VAR_DIR),
           "missing": str(home / "nothing")}.get(where, "")
    if where == "link":  # a link inside the user's folder to a folder outside the root
        os.symlink(uploads, home / "escape")
        uri = str(home / "escape")
    if where == "shard-link":  # one shard of an allowed folder pointing outside
        folder = _parquet(home / "mixed")
        os.symlink(uploads / "part-0.parquet", folder / "part-9.parquet")
        uri = str(folder)
    response = _register(user, name="sneaky", format="parquet", train=uri,
                         validation=uri, label="label")
    assert response.status_code == 400
    assert any(word in str(response.json()) for word in
               ("not inside the dataset roots", "leads out of", "does not exist",
                "is a symbolic link"))
    assert not Dataset.objects.exists()


def test_a_root_set_too_wide_still_keeps_the_platforms_own_folders_out(
    root: Path, settings: Any
) -> None:
    user = UserFactory()
    media = _home(root, user) / "uploads"  # even inside the user's own folder
    _parquet(media / "datasets")
    settings.MEDIA_ROOT = media
    response = _register(user, name="uploads", format="parquet",
                         train=str(media / "datasets"), validation=str(media / "datasets"),
                         label="label")
    assert response.status_code == 400
    assert "never registrable" in response.json()["train"][0]


def test_tfrecord_needs_its_feature_spec_and_counts(root: Path) -> None:
    user = UserFactory()
    folder = _home(root, user) / "records"
    folder.mkdir(parents=True)
    (folder / "part-00000").write_bytes(b"")
    base = {"name": "records", "format": "tfrecord", "train": str(folder),
            "validation": str(folder), "label": "label"}
    response = _register(user, **base)
    assert response.status_code == 400 and "features" in response.json()
    response = _register(user, **base, train_examples=10, validation_examples=2,
                         features={"x": {"dtype": "float32", "shape": [4]}},
                         label_spec={"dtype": "int64", "shape": []}, num_classes=3)
    assert response.status_code == 201, response.json()
    assert response.json()["features"] == {"x": {"dtype": "float32", "shape": [4]}}


def test_csv_columns_come_from_the_header(root: Path) -> None:
    user = UserFactory()
    folder = _home(root, user) / "csv"
    folder.mkdir(parents=True)
    for index in range(2):
        (folder / f"part-{index}.csv").write_text("f1,f2,target\n1,2,0\n3,4,1\n")
    response = _register(user, name="csv", format="csv", train=str(folder),
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
    assert _client(alice).get(url).status_code == 404
    assert not Dataset.objects.filter(deleted_at__isnull=True).exists()


def test_a_name_counts_its_versions_per_team_and_built_in_names_are_taken(root: Path) -> None:
    team, loner = TeamFactory(), UserFactory()
    folder = _parquet(root / team.name / "t")
    fields = {"format": "parquet", "train": str(folder), "validation": str(folder),
              "label": "label"}
    assert _register(UserFactory(team=team), name="shared", **fields).json()["version"] == 1
    again = _register(UserFactory(team=team), name="shared", **fields)
    assert again.status_code == 201 and again.json()["version"] == 2
    own = _parquet(_home(root, loner) / "t")
    mine = {**fields, "train": str(own), "validation": str(own)}
    assert _register(loner, name="shared", **mine).json()["version"] == 1  # no team
    assert _register(loner, name="digits", **mine).status_code == 400


def test_an_experiment_on_a_registered_dataset_carries_its_source_to_the_trial(
    root: Path
) -> None:
    owner = UserFactory()
    folder = _parquet(_home(root, owner) / "exp")
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


def _fields(folder: Path, **extra: Any) -> dict[str, Any]:
    return {"name": folder.name, "format": "parquet", "train": str(folder),
            "validation": str(folder), "label": "label", **extra}


def test_a_team_registers_only_in_its_own_folder_never_in_another_teams(root: Path) -> None:
    team_a, team_b = TeamFactory(), TeamFactory()
    alice, bob, loner = UserFactory(team=team_a), UserFactory(team=team_b), UserFactory()
    theirs = _parquet(root / team_a.name / "private")
    mine = _parquet(root / team_b.name / "mine")
    assert _register(alice, **_fields(theirs)).status_code == 201
    for user, folder in [(bob, theirs), (bob, root / team_a.name), (loner, theirs)]:
        response = _register(user, **_fields(folder, name="sneaky"))
        assert response.status_code == 400
        assert f"{root / team_a.name} is another team's folder" in response.json()["train"][0]
    # Not their team's: a teamless user's folder, another user's, a place staff keep.
    _parquet(_home(root, loner) / "own")
    elsewhere = _parquet(root / "corpora" / "x")
    for user, folder, reason in [
        (bob, _home(root, loner) / "own", "each teamless user's own folder"),
        (UserFactory(), _home(root, loner) / "own", "each teamless user's own folder"),
        (bob, elsewhere, f"datasets live in {root / team_b.name}"),
    ]:
        response = _register(user, **_fields(folder, name="sneaky"))
        assert response.status_code == 400 and reason in response.json()["train"][0]
    assert _register(bob, **_fields(mine)).json()["team"] == team_b.name
    assert _register(loner, **_fields(_home(root, loner) / "own")).status_code == 201
    assert set(Dataset.objects.values_list("name", flat=True)) == {"private", "mine", "own"}


def test_a_glob_over_the_root_or_out_of_the_teams_folder_is_refused(root: Path) -> None:
    team = TeamFactory()
    member, staff = UserFactory(team=team), UserFactory(is_staff=True)
    _parquet(root / team.name / "train")
    _parquet(root / "users" / "someone")
    for user, uri, reason in [
        (member, f"{root}/*/train", "a whole dataset root"),
        (staff, f"{root}/*/train", "a whole dataset root"),
        (member, f"{root}/{team.name[:-1]}*/train", "a whole dataset root"),
        (staff, f"{root}/users/*", "each teamless user's own folder"),
    ]:
        response = _register(user, **_fields(root, name="globbed", train=uri))
        assert response.status_code == 400, uri
        assert reason in response.json()["train"][0]
    glob = f"{root}/{team.name}/train/*.parquet"  # inside the team's folder: fine
    assert _register(member, **_fields(root, name="globbed", train=glob,
                                       validation=glob)).status_code == 201


@pytest.mark.parametrize("setting", ["HOME_DIR", "BOARD_DIR", "SHARED_DIR", "WORK_DIR",
                                     "RUN_DIR", "MODEL_BASE_PATH", "ENVIRONMENTS_DIR",
                                     "MODEL_IMPORT_DIR", "DATASETS_DIR", "MEDIA_ROOT"])
def test_the_platforms_folders_are_never_registrable_even_by_staff(
    setting: str, root: Path, settings: Any, platform_settings_override: PlatformSettingsOverride
) -> None:
    """Set inside a team's folder (a root set too wide): neither it, nor what is inside it,
    nor a folder holding it, even by staff for that team."""
    team = TeamFactory()
    member, staff = UserFactory(team=team), UserFactory(is_staff=True)
    place = root / team.name / "platform" / "place"
    inside = _parquet(place / "alice")  # e.g. a user's home, holding their files
    if setting == "MEDIA_ROOT":
        settings.MEDIA_ROOT = place
    else:
        platform_settings_override(**{setting.lower(): place})
    for user in (member, staff):
        for folder in (inside, place, place.parent):
            response = _register(user, **_fields(folder, name="platform", team=team.name)
                                 if user.is_staff else _fields(folder, name="platform"))
            assert response.status_code == 400, (user, folder)
            assert "never registrable" in response.json()["train"][0]
    assert not Dataset.objects.exists()


def test_var_and_the_sqlite_file_are_never_registrable_under_a_wide_root(
    root: Path, settings: Any, tmp_path: Path, platform_settings_override: PlatformSettingsOverride
) -> None:
    team = TeamFactory()
    member, staff = UserFactory(team=team), UserFactory(is_staff=True)
    var = root / team.name / "var"  # the operator's root holds var/: set too wide
    _parquet(var / "logs")
    database = _parquet(root / team.name / "db")
    (database / "db.sqlite3").write_bytes(b"SQLite format 3\x00")
    settings.VAR_DIR = var
    with pytest.warns(UserWarning, match="DATABASES"):  # read, not connected to
        settings.DATABASES = {"default": {**settings.DATABASES["default"],
                                          "ENGINE": "django.db.backends.sqlite3",
                                          "NAME": str(database / "db.sqlite3")}}
    for user in (member, staff):
        for uri in (var, var / "logs", root / team.name, database,
                    database / "db.sqlite3"):
            response = _register(user, **_fields(root, name="var", train=str(uri)))
            assert response.status_code == 400, (user, uri)
            assert "never registrable" in response.json()["train"][0]
    # A root placed inside var/ on purpose (the default var/data) is the one way in.
    data = var / "data"
    _parquet(data / team.name / "ok")
    platform_settings_override(dataset_roots=[root, data])
    assert _register(member, **_fields(data / team.name / "ok")).status_code == 201


def test_staff_register_for_a_team_outside_the_teams_folders_never_over_anothers(
    root: Path
) -> None:
    team_a, team_b = TeamFactory(), TeamFactory()
    member_a, member_b = UserFactory(team=team_a), UserFactory(team=team_b)
    staff = UserFactory(is_staff=True)
    corpus = _parquet(root / "corpora" / "imagenet")
    response = _register(staff, **_fields(corpus, team=team_a.name))
    assert response.status_code == 201, response.json()
    assert (response.json()["owner"], response.json()["team"]) == (staff.username, team_a.name)
    assert _client(member_a).get("/api/v1/datasets/").json()["count"] == 1
    assert _client(member_b).get("/api/v1/datasets/").json()["count"] == 0
    for folder in (corpus, root / "corpora"):  # inside or holding team a's dataset
        refused = _register(staff, **_fields(folder, name="copy", team=team_b.name))
        assert refused.status_code == 400
        assert "overlaps another team's or user's registered dataset" in \
            refused.json()["train"][0]
    refused = _register(staff, **_fields(_parquet(root / team_a.name / "x"), name="x",
                                         owner=member_b.username))  # b's, in a's folder
    assert refused.status_code == 400 and "another team's folder" in refused.json()["train"][0]
    assert _register(staff, **_fields(root / team_a.name / "x",
                                      owner=member_a.username)).json()["owner"] == \
        member_a.username
    # Only staff choose the holder.
    for extra in ({"team": team_a.name}, {"owner": member_a.username}):
        denied = _register(member_b, **_fields(root / team_b.name, name="mine", **extra))
        assert denied.status_code == 403 and denied.json()["code"] == "forbidden"
    assert _register(staff, **_fields(corpus, name="n", team="nobody")).status_code == 400


@pytest.mark.django_db(transaction=True)  # the node commits the trial's end as it would
def test_a_link_swapped_in_after_registration_is_refused_when_the_trial_is_built(
    root: Path
) -> None:
    team_a, team_b = TeamFactory(), TeamFactory()
    alice = UserFactory(team=team_a)
    secret = _parquet(root / team_b.name / "secret")
    folder = _parquet(root / team_a.name / "ds")
    assert _register(alice, **_fields(folder, pack=True)).status_code == 201
    response = _client(alice).post("/api/v1/experiments/", {
        "name": "swap", "model": "mlp", "dataset": "ds", "hyperparameters": {"epochs": 1}},
        format="json")
    assert response.status_code == 201, response.json()
    node = NodeFactory()
    DeviceFactory(node=node, kind="cpu", index=0)
    scheduler_pass()
    trial = Experiment.objects.get(pk=response.json()["id"]).trials.get()
    spec = trial_spec_build(trial=trial)
    assert trial_paths(spec=spec)[1][0] == str(folder)
    folder.rename(root / team_a.name / "moved")
    folder.symlink_to(secret)  # its shards are team b's now, "inside the root" once resolved
    with pytest.raises(InvalidInput, match="is a symbolic link"):
        trial_spec_build(trial=trial)
    with pytest.raises(TrainingInvalidInput, match=r"cannot be mounted.*symbolic link"):
        trial_paths(spec=spec)  # a spec built before the swap: the node refuses the mount
    trial_execute(trial_id=trial.pk, node_id=node.pk)  # the node runs it: it fails, plainly
    trial.refresh_from_db()
    assert (trial.state, trial.retryable) == ("failed", False)
    assert trial.exit_reason.startswith("invalid trial: ") and \
        "is a symbolic link" in trial.exit_reason, trial.exit_reason


def test_user_b_can_neither_read_nor_change_user_as_dataset(root: Path) -> None:
    alice, bob = UserFactory(), UserFactory()
    folder = _parquet(_home(root, alice) / "mine")
    created = _register(alice, **_fields(folder))
    url = f"/api/v1/datasets/{created.json()['id']}/"
    for method in ("get", "delete", "patch", "put"):
        assert getattr(_client(bob), method)(url, {"name": "taken"}, format="json") \
            .status_code in (404, 405), method
    assert _register(bob, **_fields(folder, name="taken")).status_code == 400
    assert Dataset.objects.get().name == "mine"
    assert Dataset.objects.get().train_uri == str(folder)


def test_a_team_whose_name_is_no_folder_has_none_and_staff_register_for_it(root: Path) -> None:
    team = TeamFactory(name="users")  # would hold every teamless user's folder
    member, staff = UserFactory(team=team), UserFactory(is_staff=True)
    for folder, reason in [(_parquet(root / "users" / "x"), "each teamless user's own folder"),
                           (_parquet(root / "corpora" / "y"), "staff register its datasets")]:
        response = _register(member, **_fields(folder))
        assert response.status_code == 400 and reason in response.json()["train"][0]
    response = _register(staff, **_fields(root / "corpora" / "y", team="users"))
    assert response.status_code == 201 and response.json()["team"] == "users"
