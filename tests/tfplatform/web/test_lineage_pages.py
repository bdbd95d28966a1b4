"""Lineage on the pages: an experiment's card and its Reproduce button; a model version's chain,
shown only to those who may see its experiment."""

import pytest
from django.test import Client

from tests.factories import ModelVersionFactory, RegisteredModelFactory, UserFactory
from tests.tfplatform.experiments.services.test_lineage import node, submitted, trained  # noqa: F401
from tfplatform.cluster.models import Node
from tfplatform.experiments.models import Experiment

pytestmark = pytest.mark.django_db


def logged_in(user: object) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_experiment_page_shows_its_lineage_and_reproduces_it(node: Node) -> None:  # noqa: F811
    alice = UserFactory()
    experiment = submitted(alice)
    lineage = trained(experiment, node=node)
    client = logged_in(alice)

    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert 'id="lineage"' in page and 'id="reproduce"' in page
    assert lineage.module_sha256[:12] in page and node.hostname in page
    assert lineage.environment_hash[:12] in page

    response = client.post(f"/experiments/{experiment.pk}/reproduce/", follow=True)
    again = Experiment.objects.exclude(pk=experiment.pk).get()
    assert response.redirect_chain[-1][0] == f"/experiments/{again.pk}/"
    shown = response.content.decode()
    assert f"Reproducing #{experiment.pk} as #{again.pk}" in shown
    assert 'id="reproduces"' in shown and again.reproduced_from_id == experiment.pk


def test_a_reproduction_that_cannot_pin_says_why_on_the_page(node: Node) -> None:  # noqa: F811
    alice = UserFactory()
    experiment = submitted(alice)
    Experiment.objects.filter(pk=experiment.pk).update(state="failed")  # never started
    refused = logged_in(alice).post(f"/experiments/{experiment.pk}/reproduce/", follow=True)
    assert "no trial of #" in refused.content.decode()
    assert Experiment.objects.count() == 1
    allowed = logged_in(alice).post(f"/experiments/{experiment.pk}/reproduce/",
                                    {"allow_changes": "on"}, follow=True)
    assert "Differs: no trial of #" in allowed.content.decode()
    assert Experiment.objects.count() == 2


def test_a_model_version_shows_the_chain_to_its_team_only(node: Node) -> None:  # noqa: F811
    alice, bob = UserFactory(), UserFactory()
    experiment = submitted(alice)
    lineage = trained(experiment, node=node)
    model = RegisteredModelFactory(owner=alice, public=True)
    ModelVersionFactory(model=model, version=1, source_experiment=experiment)

    page = logged_in(alice).get(f"/models/{model.name}/").content.decode()
    assert 'id="lineage-v1"' in page
    assert f'href="/experiments/{experiment.pk}/"' in page
    assert lineage.environment_hash[:12] in page and lineage.module_sha256[:12] in page
    public = logged_in(bob).get(f"/models/{model.name}/").content.decode()
    assert 'id="versions"' in public and 'id="lineage-v1"' not in public
    assert lineage.module_sha256[:12] not in public
