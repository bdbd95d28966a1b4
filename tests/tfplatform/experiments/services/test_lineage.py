"""Lineage: each trial records what it ran with; a model version shows the chain; Reproduce
runs an experiment again pinned, or says what can no longer be pinned.

Trials run through the services a node calls (scheduler_pass, environment_build_ensure,
trial_lineage_record, trial_outcome_record) without training: each environment's venv is
left complete beforehand, as a node that built it once leaves it (its marker and pip's lock),
so no package is fetched.
"""

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from tests.factories import (
    DeviceFactory,
    ModelVersionFactory,
    NodeFactory,
    RegisteredModelFactory,
    TeamFactory,
    UserFactory,
)
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.datasets.test_dataset_registry import _home, _parquet, root  # noqa: F401
from tests.tfplatform.experiments.test_restart import npz
from tfplatform.cluster.models import Node
from tfplatform.experiments.environments import environment_build_ensure
from tfplatform.experiments.models import Environment, Experiment, Trial, TrialLineage
from tfplatform.experiments.services.execution import trial_outcome_record
from tfplatform.experiments.services.lineage import trial_lineage_record
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.experiments.services.transitions import experiment_start
from tfplatform.experiments.services.trials import trial_set_runtime, trial_start
from training import catalog
from training.isolation import venvs
from training.spec import TrialOutcome

pytestmark = pytest.mark.django_db

IMAGE = "tensorflow/tensorflow:2.21.0"
FIRST, SECOND = "pyjokes==0.8.3", "pyjokes==0.8.2"
MODULE = b"""
import tf_keras as keras

def build_model(hparams):
    return keras.Sequential([keras.layers.Dense(hparams["num_classes"], activation="softmax")])
"""
COMPLETED = TrialOutcome(status="completed", retryable=False, exit_reason="",
                         exit_codes={"worker-0": 0})
Prebuild = Callable[..., str]


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def node() -> Node:
    found = NodeFactory()
    DeviceFactory(node=found, kind="cpu", index=0)
    return found


@pytest.fixture
def prebuilt(tmp_path: Path, platform_settings_override: PlatformSettingsOverride) -> Prebuild:
    """`prebuilt(packages, resolved=...)`: that environment's venv as a node leaves it built,
    its lock saying what pip resolved; returns its key."""
    folder = tmp_path / "environments"
    platform_settings_override(environments_dir=folder)

    def build(packages: list[str], *, resolved: list[str]) -> str:
        key = venvs.environment_key(packages=packages, base=venvs.node_runtime_identity())
        venv = folder / key
        venv.mkdir(parents=True)
        (venv / venvs.LOCK_FILE).write_text("".join(
            f"{package} --hash=sha256:{'0' * 64}\n" for package in resolved))
        (venv / venvs.READY_MARKER).touch()
        return key

    return build


def submitted(user: Any, **fields: Any) -> Experiment:
    body = {"name": "lineage", "model": "mlp", "dataset": "digits",
            "hyperparameters": {"epochs": 1, "seed": 7}, **fields}
    multipart = any(isinstance(value, SimpleUploadedFile) for value in body.values())
    if multipart:
        body["hyperparameters"] = '{"epochs": 1, "seed": 7}'
    response = client_for(user).post("/api/v1/experiments/", body,
                                     format="multipart" if multipart else "json")
    assert response.status_code == 201, response.json()
    return Experiment.objects.get(pk=response.json()["id"])


def trained(experiment: Experiment, *, node: Node) -> TrialLineage:
    """Its trial started as a node starts it (environment built, lineage recorded) and ended
    completed."""
    assert scheduler_pass() == 1
    trial = experiment.trials.get(state=Trial.State.PENDING)
    started = trial_start(trial_id=trial.pk)
    assert started is not None
    python = environment_build_ensure(environment=started.experiment.environment, node=node,
                                      experiment=started.experiment, runtime=None)
    lineage = trial_lineage_record(trial=started, python=python, node=node)
    experiment_start(experiment=started.experiment)
    trial_set_runtime(trial=started, runtime="sandbox", tensorflow_version="2.21.0")
    trial_outcome_record(trial=started, outcome=COMPLETED)
    assert Experiment.objects.get(pk=experiment.pk).state == "completed"
    return lineage


def test_a_trial_records_its_environment_module_dataset_seed_and_node(
    node: Node, prebuilt: Prebuild
) -> None:
    Environment.objects.create(name="with-jokes", image=IMAGE, tensorflow_version="2.21.0",
                               extra_packages=[FIRST])
    key = prebuilt([FIRST], resolved=[FIRST, "six==1.17.0"])
    owner = UserFactory()
    experiment = submitted(owner, environment="with-jokes", model="upload",
                           model_file=SimpleUploadedFile("net.py", MODULE))

    lineage = trained(experiment, node=node)

    assert lineage.module == "upload"
    assert lineage.module_sha256 == hashlib.sha256(MODULE).hexdigest()
    assert lineage.environment_name == "with-jokes" and lineage.environment_revision == 1
    assert lineage.packages == [FIRST, "six==1.17.0"] and lineage.packages_resolved
    assert lineage.build_key == key and lineage.image == IMAGE
    assert lineage.dataset == "digits" and lineage.dataset_version is None
    assert lineage.seed == 7 and lineage.nodes == [node.hostname]
    shown = client_for(owner).get(f"/api/v1/experiments/{experiment.pk}/lineage/").json()
    assert shown["trial_id"] == lineage.trial_id and shown["tensorflow_version"] == "2.21.0"
    assert shown["environment"]["content_hash"] == lineage.environment_hash
    assert len(lineage.environment_hash) == 64 and shown["module_sha256"] == lineage.module_sha256


def test_a_built_in_model_is_hashed_from_its_source(node: Node) -> None:
    experiment = submitted(UserFactory())
    lineage = trained(experiment, node=node)
    source = catalog.builtin_module_path(model="mlp")
    assert source is not None
    assert lineage.module_sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    # The seeded default environment pins nothing: the node's runtime, no venv to resolve.
    assert experiment.environment is not None
    assert lineage.environment_name == experiment.environment.name
    assert lineage.packages == [] and not lineage.packages_resolved


def test_retrained_after_an_environment_edit_another_hash_and_reproduction_builds_the_first(
    node: Node, prebuilt: Prebuild
) -> None:
    team = TeamFactory()
    alice, mate = UserFactory(team=team), UserFactory(team=team)
    staff = UserFactory(is_staff=True)
    client = client_for(staff)
    created = client.post("/api/v1/environments/", {
        "name": "jokes", "image": IMAGE, "tensorflow_version": "2.21.0",
        "extra_packages": [FIRST]}, format="json")
    assert created.status_code == 201, created.json()
    first_key = prebuilt([FIRST], resolved=[FIRST])
    second_key = prebuilt([SECOND], resolved=[SECOND])
    model = RegisteredModelFactory(owner=alice, team=team, public=True)

    first = submitted(alice, environment="jokes")
    trained(first, node=node)
    ModelVersionFactory(model=model, version=1, source_experiment=first)
    edited = client.patch(f"/api/v1/environments/{created.json()['id']}/",
                          {"extra_packages": [SECOND]}, format="json")
    assert edited.status_code == 200, edited.json()
    second = submitted(alice, environment="jokes")
    trained(second, node=node)
    ModelVersionFactory(model=model, version=2, source_experiment=second)

    chains = [client_for(mate).get(f"/api/v1/models/{model.name}/versions/{v}/").json()["lineage"]
              for v in (1, 2)]
    assert [chain["experiment_id"] for chain in chains] == [first.pk, second.pk]
    hashes = [chain["environment"]["content_hash"] for chain in chains]
    assert hashes[0] != hashes[1] and all(len(h) == 64 for h in hashes)
    assert [chain["environment"]["revision"] for chain in chains] == [1, 2]
    assert [chain["environment"]["packages"] for chain in chains] == [[FIRST], [SECOND]]
    assert chains[0]["environment"]["changed_since"] and chains[0]["seed"] == 7
    assert chains[0]["module_sha256"] and chains[0]["dataset"]["name"] == "digits"

    answer = client_for(mate).post(f"/api/v1/experiments/{first.pk}/reproduce/", {},
                                   format="json")
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["changes"] == []
    assert any("revision 1" in line for line in body["pinned"])
    assert any("changed since (now revision 2)" in note for note in body["notes"])
    again = Experiment.objects.get(pk=body["experiment"]["id"])
    assert again.owner == mate and again.reproduced_from == first
    assert again.hyperparameters == first.hyperparameters
    rerun = trained(again, node=node)
    # The first's packages, built from the first's venv, though the environment holds others.
    assert rerun.build_key == first_key != second_key
    assert rerun.environment_hash == hashes[0] and rerun.packages == [FIRST]
    shown = client_for(staff).get(f"/api/v1/experiments/{again.pk}/lineage/").json()
    assert shown["reproduced_from_id"] == first.pk
    assert shown["environment"]["revision"] == 1 and shown["environment"]["changed_since"]
    detail = client_for(mate).get(f"/api/v1/experiments/{again.pk}/").json()
    assert detail["environment_revision"] == 1 and detail["reproduced_from"] == first.pk


def test_user_b_can_neither_reproduce_nor_read_user_as_lineage(node: Node) -> None:
    alice, bob = UserFactory(), UserFactory()
    experiment = submitted(alice)
    trained(experiment, node=node)
    model = RegisteredModelFactory(owner=alice, public=True)
    ModelVersionFactory(model=model, version=1, source_experiment=experiment)

    bobs = client_for(bob)
    assert bobs.post(f"/api/v1/experiments/{experiment.pk}/reproduce/", {},
                     format="json").status_code == 404
    assert bobs.get(f"/api/v1/experiments/{experiment.pk}/lineage/").status_code == 404
    version = bobs.get(f"/api/v1/models/{model.name}/versions/1/")
    assert version.status_code == 200 and version.json()["lineage"] is None  # public model
    assert Experiment.objects.count() == 1
    alices = client_for(alice).get(f"/api/v1/models/{model.name}/versions/1/").json()
    assert alices["lineage"]["experiment_id"] == experiment.pk


def test_an_active_experiment_or_a_bad_body_is_refused_with_a_400(node: Node) -> None:
    alice = UserFactory()
    experiment = submitted(alice)
    client = client_for(alice)
    refused = client.post(f"/api/v1/experiments/{experiment.pk}/reproduce/", {}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"] == ("Only a finished experiment can be reproduced; this one "
                                       "is queued.")
    trained(experiment, node=node)
    url = f"/api/v1/experiments/{experiment.pk}/reproduce/"
    odd = client.post(url, {"allow_changes": "perhaps"}, format="json")
    assert odd.status_code == 400 and "allow_changes" in odd.json()
    unknown = client.post(url, {"allow_change": True}, format="json")
    assert unknown.status_code == 400 and "allow_change" in unknown.json()
    assert Experiment.objects.count() == 1


def test_a_deleted_dataset_version_refuses_the_reproduction_unless_changes_are_allowed(
    node: Node, root: Path  # noqa: F811
) -> None:
    alice = UserFactory()
    client = client_for(alice)
    folder = _parquet(_home(root, alice) / "tab")
    fields = {"name": "tab", "format": "parquet", "train": str(folder),
              "validation": str(folder), "label": "label"}
    v1 = client.post("/api/v1/datasets/", fields, format="json").json()
    experiment = submitted(alice, dataset="tab")
    lineage = trained(experiment, node=node)
    assert lineage.dataset_version == 1 and lineage.dataset_fingerprint == v1["fingerprint"]
    v2 = client.post("/api/v1/datasets/", fields, format="json").json()
    assert client.delete(f"/api/v1/datasets/{v1['id']}/").status_code == 204

    refused = client.post(f"/api/v1/experiments/{experiment.pk}/reproduce/", {}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "not_reproducible"
    assert "dataset 'tab' version 1 is deleted; its newest version, 2, would run" in (
        refused.json()["error"])
    assert Experiment.objects.count() == 1

    allowed = client.post(f"/api/v1/experiments/{experiment.pk}/reproduce/",
                          {"allow_changes": True}, format="json")
    assert allowed.status_code == 201, allowed.json()
    assert allowed.json()["changes"] == [
        "dataset 'tab' version 1 is deleted; its newest version, 2, would run"]
    again = Experiment.objects.get(pk=allowed.json()["experiment"]["id"])
    assert again.dataset_version_id == v2["id"] and again.dataset_version_number == 2
    chain = client.get(f"/api/v1/experiments/{experiment.pk}/lineage/").json()["dataset"]
    assert chain == {"name": "tab", "version": 1, "dataset_id": None,
                     "fingerprint": v1["fingerprint"], "fingerprint_seen": v1["fingerprint"],
                     "deleted": True, "changed": False}


def test_changed_files_or_a_changed_shared_module_are_named(
    node: Node, root: Path, tmp_path: Path,  # noqa: F811
    platform_settings_override: PlatformSettingsOverride,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    platform_settings_override(shared_dir=shared)
    module = shared / "net.py"
    module.write_bytes(MODULE)
    alice = UserFactory()
    client = client_for(alice)
    folder = _parquet(_home(root, alice) / "tab")
    client.post("/api/v1/datasets/", {"name": "tab", "format": "parquet", "train": str(folder),
                                      "validation": str(folder), "label": "label"},
                format="json")
    experiment = submitted(alice, dataset="tab", model=str(module))
    trained(experiment, node=node)

    module.write_bytes(MODULE + b"\n# tuned\n")
    shard = folder / "part-0.parquet"
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    refused = client.post(f"/api/v1/experiments/{experiment.pk}/reproduce/", {}, format="json")
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert "dataset 'tab' version 1: its files changed since it was registered" in error
    assert f"model module {module}: its source changed since" in error


def test_a_reproduction_reruns_the_same_uploaded_bytes(node: Node) -> None:
    alice = UserFactory()
    data = npz()
    experiment = submitted(alice, model="upload", dataset="upload",
                           model_file=SimpleUploadedFile("net.py", MODULE),
                           dataset_file=SimpleUploadedFile("points.npz", data))
    lineage = trained(experiment, node=node)
    assert lineage.dataset_fingerprint == hashlib.sha256(data).hexdigest()

    answer = client_for(alice).post(f"/api/v1/experiments/{experiment.pk}/reproduce/", {},
                                    format="json").json()
    assert f"dataset file points.npz (sha256 {lineage.dataset_fingerprint[:12]})" in (
        answer["pinned"])
    assert f"model module upload (sha256 {lineage.module_sha256[:12]})" in answer["pinned"]
    again = trained(Experiment.objects.get(pk=answer["experiment"]["id"]), node=node)
    assert (again.module_sha256, again.dataset_fingerprint) == (
        lineage.module_sha256, lineage.dataset_fingerprint)
