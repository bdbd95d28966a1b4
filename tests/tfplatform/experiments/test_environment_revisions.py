"""Environment revisions: each change of an environment's contents keeps an immutable revision;
labels (name, GPU support) are no contents; experiments pin the revision current at
submission."""

from importlib import import_module

import pytest
from django.apps import apps
from django.test import Client

from tests.factories import EnvironmentFactory, ExperimentFactory, UserFactory
from tfplatform.experiments.environments import environment_create, environment_update
from tfplatform.experiments.models import EnvironmentRevision
from tfplatform.experiments.revisions import environment_content_hash
from tfplatform.experiments.services.submission import ExperimentRequest, experiment_create

pytestmark = pytest.mark.django_db

IMAGE = "tensorflow/tensorflow:2.21.0"


def _revisions(environment: object) -> list[tuple[int, str, str, list[str]]]:
    return [(r.number, r.image, r.tensorflow_version, r.packages)
            for r in EnvironmentRevision.objects.filter(environment=environment)]


def test_a_change_of_contents_adds_a_revision_and_a_label_does_not() -> None:
    environment = environment_create(name="jokes", image=IMAGE, tensorflow_version="2.21.0",
                                     extra_packages=["pyjokes==0.8.3"])
    environment_update(environment=environment, name="jokes-2", gpu_capable=True)
    environment_update(environment=environment, extra_packages=["pyjokes==0.8.3"])
    assert _revisions(environment) == [(1, IMAGE, "2.21.0", ["pyjokes==0.8.3"])]

    environment_update(environment=environment, extra_packages=["PyJokes==0.8.2"])
    environment_update(environment=environment, image="tensorflow/tensorflow:2.20.0")
    assert _revisions(environment) == [
        (1, IMAGE, "2.21.0", ["pyjokes==0.8.3"]),
        (2, IMAGE, "2.21.0", ["pyjokes==0.8.2"]),
        (3, "tensorflow/tensorflow:2.20.0", "2.21.0", ["pyjokes==0.8.2"]),
    ]
    hashes = [r.content_hash for r in EnvironmentRevision.objects.filter(
        environment=environment)]
    assert len(set(hashes)) == 3
    assert hashes[1] == environment_content_hash(
        image=IMAGE, tensorflow_version="2.21.0", packages=["pyjokes==0.8.2"])


def test_an_experiment_pins_the_revision_current_at_submission() -> None:
    # Made around the services (as the seeded defaults are): its first revision comes with
    # the first experiment that needs it.
    environment = EnvironmentFactory(extra_packages=[])
    owner = UserFactory()
    request = ExperimentRequest(name="a", model="mlp", dataset="digits",
                                hyperparameters={"epochs": 1}, environment=environment)
    first = experiment_create(owner=owner, request=request)
    again = experiment_create(owner=owner, request=request)
    environment_update(environment=environment, tensorflow_version="2.20.0")
    later = experiment_create(owner=owner, request=request)

    assert first.environment_revision is not None and again.environment_revision is not None
    assert first.environment_revision.number == again.environment_revision.number == 1
    assert later.environment_revision is not None and later.environment_revision.number == 2
    assert ExperimentFactory().environment_revision is None  # rows made before revisions


def test_the_migration_hashes_existing_environments_as_the_services_do() -> None:
    migration = import_module("tfplatform.experiments.migrations.0018_lineage")
    environment = EnvironmentFactory(extra_packages=["six==1.17.0", "pyjokes==0.8.3"])
    migration.revisions_create(apps, None)
    [revision] = EnvironmentRevision.objects.filter(environment=environment)
    assert revision.number == 1 and revision.packages == ["pyjokes==0.8.3", "six==1.17.0"]
    assert revision.content_hash == environment_content_hash(
        image=environment.image, tensorflow_version=environment.tensorflow_version,
        packages=environment.extra_packages)


def test_the_staff_page_lists_the_revisions() -> None:
    environment = environment_create(name="jokes", image=IMAGE, tensorflow_version="2.21.0",
                                     extra_packages=["pyjokes==0.8.3"])
    environment_update(environment=environment, extra_packages=["pyjokes==0.8.2"])
    client = Client()
    client.force_login(UserFactory(is_staff=True))
    page = client.get(f"/environments/{environment.pk}/").content.decode()
    table = page.split('id="revisions"', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr>") == 3  # the head, revisions 1 and 2
    assert "pyjokes==0.8.3" in table and "pyjokes==0.8.2" in table
