"""Environments: staff manage them through the API and the admin; nodes build and record them.

The builds are real: a venv on this machine installing pyjokes 0.8.3 from the package index.
"""

import fcntl
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import EnvironmentFactory, ExperimentFactory, NodeFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.experiments.environments import (
    EnvironmentBuildFailed,
    environment_build_ensure,
    environment_update,
)
from tfplatform.experiments.models import Environment, EnvironmentBuild, Experiment
from tfplatform.experiments.services.transitions import experiment_transition
from training.isolation.container_settings import RUNTIME_IMAGE, ContainerSettings
from training.isolation.containers import runtime_image_ensure
from training.isolation.images import DERIVED_REPOSITORY, image_key
from training.isolation.runtime import TaskPython
from training.isolation.runtime_factory import runtime_for
from training.isolation.venvs import environment_key, node_runtime_identity

PACKAGE = "pyjokes==0.8.3"
NEW = {"name": "jokes", "image": "tensorflow/tensorflow:2.21.0", "tensorflow_version": "2.21.0"}


def client_for(user: object) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    return client


@pytest.fixture
def environments_dir(tmp_path: Path, settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> Path:
    root = tmp_path / "environments"
    platform_settings_override(environments_dir=root)
    return root


@pytest.mark.django_db
def test_staff_create_edit_and_delete_environments_through_the_api() -> None:
    staff = client_for(UserFactory(is_staff=True))
    created = staff.post(
        "/api/v1/environments/",
        {**NEW, "extra_packages": ["PyJokes == 0.8.3", "six==1.16.0"]},
        format="json",
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["extra_packages"] == ["pyjokes==0.8.3", "six==1.16.0"]
    assert (body["gpu_capable"], body["builds"]) == (False, [])

    url = f"/api/v1/environments/{body['id']}/"
    changed = staff.patch(url, {"gpu_capable": True, "extra_packages": [PACKAGE]}, format="json")
    assert changed.status_code == 200, changed.json()
    assert changed.json()["extra_packages"] == [PACKAGE] and changed.json()["gpu_capable"]
    assert changed.json()["name"] == "jokes"  # what PATCH does not name stays

    # Every signed-in user reads them; choosing one is part of submitting.
    user = client_for(UserFactory())
    assert user.get(url).json()["extra_packages"] == [PACKAGE]
    assert "jokes" in [e["name"] for e in user.get("/api/v1/environments/").json()["results"]]

    assert staff.delete(url).status_code == 204
    assert not Environment.objects.filter(name="jokes").exists()
    assert staff.get(url).status_code == 404


@pytest.mark.django_db
def test_non_staff_cannot_write_environments() -> None:
    environment = EnvironmentFactory(name="locked")
    user = client_for(UserFactory())
    url = f"/api/v1/environments/{environment.pk}/"
    assert user.post("/api/v1/environments/", NEW, format="json").status_code == 403
    assert user.patch(url, {"extra_packages": [PACKAGE]}, format="json").status_code == 403
    assert user.delete(url).status_code == 403
    environment.refresh_from_db()
    assert environment.extra_packages == []
    assert APIClient().get("/api/v1/environments/").status_code in (401, 403)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"extra_packages": ["pyjokes"]}, "extra_packages", "exact version with =="),
        ({"extra_packages": ["pyjokes>=0.8"]}, "extra_packages", "exact version with =="),
        (
            {"extra_packages": ["pyjokes @ https://example.org/pyjokes.whl"]},
            "extra_packages",
            "URL or path",
        ),
        ({"extra_packages": ["--index-url=https://example.org"]}, "extra_packages", "pinned"),
        ({"extra_packages": "pyjokes==0.8.3"}, "extra_packages", "list"),
        ({"name": "tensorflow-2.21-cpu"}, "name", "exists"),
        ({"name": "  "}, "name", "blank"),
        ({"image": "x" * 301}, "image", "300"),
        ({"colour": "blue"}, "colour", "Unknown field"),
    ],
)
def test_bad_environments_are_400_with_the_field_error(
    change: dict[str, Any], field: str, says: str
) -> None:
    response = client_for(UserFactory(is_staff=True)).post(
        "/api/v1/environments/", {**NEW, **change}, format="json"
    )
    assert response.status_code == 400
    body = response.json()
    assert "error" in body and says in str(body[field]), body
    assert not Environment.objects.filter(name="jokes").exists()


@pytest.mark.django_db
def test_an_environment_in_use_cannot_be_deleted() -> None:
    environment = EnvironmentFactory(name="in-use")
    ExperimentFactory(environment=environment)
    response = client_for(UserFactory(is_staff=True)).delete(
        f"/api/v1/environments/{environment.pk}/"
    )
    assert response.status_code == 409
    assert "used by 1 experiment;" in response.json()["error"]
    assert Environment.objects.filter(pk=environment.pk).exists()


@pytest.mark.django_db
def test_a_user_picks_an_environment_by_name_when_submitting() -> None:
    EnvironmentFactory(name="jokes", extra_packages=[PACKAGE])
    response = client_for(UserFactory()).post(
        "/api/v1/experiments/",
        {"name": "x", "model": "mlp", "dataset": "digits", "environment": "jokes"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["environment"] == "jokes"
    chosen = Experiment.objects.get().environment
    assert chosen is not None and chosen.name == "jokes"


@pytest.mark.django_db
def test_the_admin_validates_and_normalizes_packages() -> None:
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    # The builds inline's management form comes with every admin form.
    inline = {"builds-TOTAL_FORMS": "0", "builds-INITIAL_FORMS": "0"}
    form = {**NEW, **inline, "extra_packages": '["pyjokes"]'}
    refused = client.post("/admin/experiments/environment/add/", form)
    assert refused.status_code == 200
    assert "exact version with ==" in refused.content.decode()
    assert not Environment.objects.filter(name="jokes").exists()

    saved = client.post(
        "/admin/experiments/environment/add/", {**form, "extra_packages": '["PyJokes==0.8.3"]'}
    )
    assert saved.status_code == 302
    environment = Environment.objects.get(name="jokes")
    assert environment.extra_packages == [PACKAGE]

    EnvironmentBuild.objects.create(environment=environment, node=NodeFactory(), key="k")
    changed = client.post(
        f"/admin/experiments/environment/{environment.pk}/change/",
        {**form, "extra_packages": '["pyjokes==0.8.2"]'},
    )
    assert changed.status_code == 302
    environment.refresh_from_db()
    assert environment.extra_packages == ["pyjokes==0.8.2"]
    assert not environment.builds.exists()  # as through the API: the old build says nothing


@pytest.mark.django_db
def test_nothing_to_build_is_the_nodes_own_python(environments_dir: Path) -> None:
    node = NodeFactory()
    assert environment_build_ensure(environment=EnvironmentFactory(), node=node) == TaskPython()
    assert environment_build_ensure(environment=None, node=node) == TaskPython()
    assert not EnvironmentBuild.objects.exists() and not environments_dir.exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_build_is_recorded_and_shown_as_the_experiments_pending_reason(
    environments_dir: Path,
) -> None:
    environment = EnvironmentFactory(name="jokes", extra_packages=[PACKAGE])
    node = NodeFactory(hostname="box-7")
    experiment = experiment_transition(
        experiment=ExperimentFactory(environment=environment), to="scheduled"
    )
    key = environment_key(packages=[PACKAGE], base=node_runtime_identity())
    environments_dir.mkdir(parents=True)
    results: dict[str, Any] = {}

    def ensure() -> None:
        try:
            results["python"] = environment_build_ensure(
                environment=environment, node=node, experiment=experiment
            )
        finally:
            connection.close()

    # Another trial of the node holds the build: this one waits, and says why.
    with (environments_dir / f"{key}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiting = threading.Thread(target=ensure)
        waiting.start()
        reason = "Building environment 'jokes' on box-7."
        _wait_for(lambda: Experiment.objects.get(pk=experiment.pk).pending_reason == reason)
        assert EnvironmentBuild.objects.get(environment=environment).state == "building"
        fcntl.flock(lock, fcntl.LOCK_UN)
    waiting.join(timeout=300)

    python = results["python"]
    assert python.key == key and python.executable == str(environments_dir / key / "bin/python")
    build = EnvironmentBuild.objects.get(environment=environment, node=node, key=key)
    assert build.state == "ready"
    assert "Successfully installed pyjokes-0.8.3" in build.log
    assert build.started_at is not None and build.finished_at is not None
    assert Experiment.objects.get(pk=experiment.pk).pending_reason == ""

    # The next trial on the node finds it built: no build, nothing recorded again.
    finished_at = build.finished_at
    assert environment_build_ensure(environment=environment, node=node) == python
    build.refresh_from_db()
    assert (build.state, build.finished_at) == ("ready", finished_at)

    # Another environment pinning the same packages shares the venv, with a row of its own.
    twin = EnvironmentFactory(name="jokes-gpu", gpu_capable=True, extra_packages=[PACKAGE])
    assert environment_build_ensure(environment=twin, node=node) == python
    assert EnvironmentBuild.objects.get(environment=twin).state == "ready"


@pytest.mark.slow
@pytest.mark.django_db
def test_a_failed_build_is_recorded_and_fails_with_pips_reason(environments_dir: Path) -> None:
    environment = EnvironmentFactory(name="no-such-jokes", extra_packages=["pyjokes==99.0.0"])
    experiment = experiment_transition(
        experiment=ExperimentFactory(environment=environment), to="scheduled"
    )
    node = NodeFactory(hostname="box-8")
    with pytest.raises(EnvironmentBuildFailed) as failed:
        environment_build_ensure(environment=environment, node=node, experiment=experiment)
    message = failed.value.message
    assert message.startswith("Environment 'no-such-jokes' failed to build on box-8: ")
    assert "No matching distribution found for pyjokes==99.0.0" in message
    build = EnvironmentBuild.objects.get(environment=environment, node=node)
    assert build.state == "failed" and build.finished_at is not None
    assert "No matching distribution found for pyjokes==99.0.0" in build.log
    experiment.refresh_from_db()
    assert experiment.pending_reason == ""


@pytest.mark.django_db
def test_new_packages_forget_the_builds_of_the_old_ones() -> None:
    environment = EnvironmentFactory(extra_packages=[PACKAGE])
    EnvironmentBuild.objects.create(
        environment=environment, node=NodeFactory(), key="k", state="ready"
    )
    environment_update(environment=environment, extra_packages=["PyJokes==0.8.3"])
    assert environment.builds.count() == 1  # the same packages, spelt otherwise
    environment_update(environment=environment, extra_packages=["pyjokes==0.8.2"])
    assert environment.builds.count() == 0
    assert environment.extra_packages == ["pyjokes==0.8.2"]


def _wait_for(condition: Any, *, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.django_db
def test_a_container_node_derives_the_image_or_layers_the_venv_on_its_own(
    environments_dir: Path, podman_engine: str, python_image: str
) -> None:
    containers = ContainerSettings(engine_url=podman_engine, node="box-9", oci_runtime="runc")
    runtime = runtime_for(name="podman", containers=containers)
    node = NodeFactory(hostname="box-9")
    own_python = EnvironmentFactory(name="own-python", image=python_image,
                                    extra_packages=[PACKAGE])

    python = environment_build_ensure(environment=own_python, node=node, runtime=runtime)

    key = image_key(settings=containers, base=python_image, packages=[PACKAGE])
    assert python == TaskPython(key=f"image:{DERIVED_REPOSITORY}:{key}", executable="python3",
                                image=f"{DERIVED_REPOSITORY}:{key}")
    build = EnvironmentBuild.objects.get(environment=own_python, node=node)
    assert (build.key, build.state) == (key, "ready")
    # An image that runs the node's own runtime gets the venv, as a sandbox node would.
    runtime_image_ensure(settings=containers)
    node_image = EnvironmentFactory(name="node-image", image=RUNTIME_IMAGE,
                                    extra_packages=[PACKAGE])
    venv = environment_build_ensure(environment=node_image, node=node, runtime=runtime)
    assert venv.image == "" and venv.executable.startswith(str(environments_dir))
    # A base the node cannot get fails the trial clearly.
    missing = EnvironmentFactory(name="missing", image="localhost/no-such-image:1")
    with pytest.raises(EnvironmentBuildFailed) as failed:
        environment_build_ensure(environment=missing, node=node, runtime=runtime)
    assert "is not on node box-9 and could not be pulled" in failed.value.message
