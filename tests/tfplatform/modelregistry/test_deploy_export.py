"""Deploy publishes the export the platform assigned to the experiment, never a path its trial
reported, and refuses an export holding a link or a special file."""

import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.conftest import peer_data_or_skip
from tests.factories import ExperimentFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.modelregistry.conftest import HALF_PLUS_THREE, HALF_PLUS_TWO, version_loaded
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.execution import experiment_work_dir
from tfplatform.modelregistry.models import ModelVersion, RegisteredModel

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def work_dir(settings: Any, tmp_path: Path,
    platform_settings_override: PlatformSettingsOverride) -> Path:
    platform_settings_override(work_dir=tmp_path / "work")
    return tmp_path / "work"


@pytest.fixture
def model_base(settings: Any, tmp_path: Path,
    platform_settings_override: PlatformSettingsOverride) -> Path:
    """Where versions would be published, for tests that must end before the model server."""
    base = tmp_path / "models"
    platform_settings_override(model_base_path=base)
    return base


def completed(**fields: Any) -> Experiment:
    experiment: Experiment = ExperimentFactory(state=Experiment.State.COMPLETED, **fields)
    return experiment


def exported(experiment: Experiment, source: str = HALF_PLUS_TWO) -> Path:
    """A real SavedModel (one of TF Serving's test models) where a trial of `experiment` exports."""
    export = experiment_work_dir(experiment_id=experiment.pk) / "export"
    shutil.copytree(peer_data_or_skip() / "tf-serving-testdata" / source / "00000123", export)
    return export


def deploy(experiment: Experiment, name: str) -> Any:
    client = APIClient()
    client.force_authenticate(experiment.owner)
    return client.post(
        f"/api/v1/experiments/{experiment.pk}/deploy/", {"model_name": name}, format="json"
    )


def assert_nothing_published(base: Path, name: str) -> None:
    assert not RegisteredModel.objects.filter(name=name).exists()
    assert not ModelVersion.objects.exists()
    assert not (base / name).exists()


def test_deploy_publishes_its_own_export_not_the_path_its_trial_reported(
    model_server: dict[str, Any], work_dir: Path
) -> None:
    victim = completed()
    victims_export = exported(victim, HALF_PLUS_THREE)
    attacker = completed(results={"export_path": str(victims_export)})
    own_export = exported(attacker, HALF_PLUS_TWO)

    response = deploy(attacker, "mine")

    assert response.status_code == 202, response.content
    assert response.json()["version"] == 1 and response.json()["state"] == "loading"
    owner = APIClient()
    owner.force_authenticate(attacker.owner)
    assert version_loaded(owner, "mine", 1)["state"] == "available"
    published = model_server["base"] / "mine" / "1" / "saved_model.pb"
    assert published.read_bytes() == (own_export / "saved_model.pb").read_bytes()
    assert published.read_bytes() != (victims_export / "saved_model.pb").read_bytes()
    client = APIClient()
    client.force_authenticate(attacker.owner)
    predicted = client.post(
        "/api/v1/models/mine:predict",
        data=json.dumps({"instances": [0.0]}),
        content_type="application/json",
    )
    assert predicted.json() == {"predictions": [2.0]}  # half plus two: its own, not plus three


def test_deploy_without_an_own_export_is_refused_whatever_its_results_claim(
    work_dir: Path, model_base: Path
) -> None:
    victims_export = exported(completed(), HALF_PLUS_THREE)
    attacker = completed(results={"export_path": str(victims_export)})

    response = deploy(attacker, "stolen")

    assert response.status_code == 409, response.content
    assert "no exported model" in response.json()["error"]
    assert_nothing_published(model_base, "stolen")


def link_to_passwd(export: Path, victims_export: Path) -> None:
    (export / "variables" / "evil").symlink_to("/etc/passwd")


def link_to_the_victims_variables(export: Path, victims_export: Path) -> None:
    shutil.rmtree(export / "variables")
    (export / "variables").symlink_to(victims_export / "variables")


def export_is_the_victims(export: Path, victims_export: Path) -> None:
    shutil.rmtree(export)
    export.symlink_to(victims_export)


def fifo_inside(export: Path, victims_export: Path) -> None:
    os.mkfifo(export / "assets" / "pipe")


def socket_inside(export: Path, victims_export: Path) -> None:
    os.mknod(export / "assets" / "sock", stat.S_IFSOCK | 0o600)


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        (link_to_passwd, "variables/evil is a symbolic link"),
        (link_to_the_victims_variables, "variables is a symbolic link"),
        (export_is_the_victims, "source directory is a symbolic link"),
        (fifo_inside, "assets/pipe is a fifo"),
        (socket_inside, "assets/sock is a socket"),
    ],
)
def test_an_export_holding_a_link_or_a_special_file_is_refused_and_nothing_is_published(
    work_dir: Path, model_base: Path, plant: Callable[[Path, Path], None], message: str
) -> None:
    victims_export = exported(completed(), HALF_PLUS_THREE)
    experiment = completed()
    plant(exported(experiment, HALF_PLUS_TWO), victims_export)

    response = deploy(experiment, "planted")

    assert response.status_code == 409, response.content
    assert message in response.json()["error"]
    assert_nothing_published(model_base, "planted")


def test_only_a_completed_experiment_deploys(work_dir: Path, model_base: Path) -> None:
    experiment: Experiment = ExperimentFactory(state=Experiment.State.FAILED)
    exported(experiment)
    response = deploy(experiment, "failed-one")
    assert response.status_code == 409
    assert "Only a completed experiment" in response.json()["error"]
    assert_nothing_published(model_base, "failed-one")
