"""The staff environment pages: each node's build, the form with errors beside fields, logs."""

import pytest
from django.test import Client

from tests.factories import EnvironmentFactory, ExperimentFactory, NodeFactory, UserFactory
from tfplatform.experiments.models import Environment, EnvironmentBuild

pytestmark = pytest.mark.django_db

PACKAGE = "pyjokes==0.8.3"


def logged_in(user: object) -> Client:
    client = Client()
    client.force_login(user)
    return client


def staff() -> Client:
    return logged_in(UserFactory(is_staff=True))


def test_the_list_shows_each_nodes_build_and_its_log() -> None:
    jokes = EnvironmentFactory(name="jokes", extra_packages=[PACKAGE])
    ExperimentFactory(environment=jokes)
    ready = EnvironmentBuild.objects.create(
        environment=jokes, node=NodeFactory(hostname="box-1"), key="a1", state="ready",
        log="Successfully installed pyjokes-0.8.3\nEnvironment ready.",
    )
    EnvironmentBuild.objects.create(
        environment=jokes, node=NodeFactory(hostname="box-2"), key="b2", state="failed",
        log="ERROR: No matching distribution found for pyjokes==0.8.3",
    )
    EnvironmentBuild.objects.create(
        environment=jokes, node=NodeFactory(hostname="box-3"), key="c3", state="building"
    )
    client = staff()
    html = client.get("/environments/").content.decode()
    row = html[html.index(f'id="environment-{jokes.pk}"'):]
    row = row[: row.index("</tr>")]
    for hostname, state in (("box-1", "ready"), ("box-2", "failed"), ("box-3", "building")):
        pill = f'<span class="state state-{state}">{state}</span>'
        assert f"<strong>{hostname}</strong> {pill}" in row
    assert f'href="/environments/builds/{ready.pk}/"' in row
    assert "<li>pyjokes==0.8.3</li>" in row and "1 experiment<" in row
    # The platform's defaults pin nothing: trials use each node's runtime as it is.
    assert "nothing to build" in html

    log = client.get(f"/environments/builds/{ready.pk}/").content.decode()
    assert "jokes on box-1" in log and 'id="build-state">ready<' in log
    assert "Successfully installed pyjokes-0.8.3\nEnvironment ready." in log


def test_creating_shows_errors_beside_the_fields_then_saves_normalized() -> None:
    client = staff()
    form = {
        "name": "jokes",
        "image": "tensorflow/tensorflow:2.21.0",
        "tensorflow_version": "2.21.0",
        "extra_packages": "pyjokes\n",
    }
    refused = client.post("/environments/new/", form)
    html = refused.content.decode()
    assert refused.status_code == 200
    assert 'class="field has-error" id="field-extra_packages"' in html
    assert "exact version with ==" in _field(html, "extra_packages")
    assert not Environment.objects.filter(name="jokes").exists()

    taken = client.post(
        "/environments/new/", {**form, "name": "tensorflow-2.21-cpu", "extra_packages": PACKAGE}
    )
    assert "exists" in _field(taken.content.decode(), "name")

    saved = client.post(
        "/environments/new/", {**form, "extra_packages": "PyJokes==0.8.3\n\nsix == 1.16.0\n"}
    )
    assert saved.status_code == 302 and saved["Location"] == "/environments/"
    assert Environment.objects.get(name="jokes").extra_packages == [PACKAGE, "six==1.16.0"]


def test_editing_and_deleting_an_environment() -> None:
    jokes = EnvironmentFactory(name="jokes", extra_packages=[PACKAGE])
    client = staff()
    page = client.get(f"/environments/{jokes.pk}/").content.decode()
    assert "pyjokes==0.8.3</textarea>" in page and 'id="delete-environment"' in page
    saved = client.post(
        f"/environments/{jokes.pk}/",
        {"name": "jokes", "image": "img", "tensorflow_version": "2.21.0", "gpu_capable": "on",
         "extra_packages": "pyjokes==0.8.2"},
    )
    assert saved.status_code == 302
    jokes.refresh_from_db()
    assert (jokes.image, jokes.gpu_capable, jokes.extra_packages) == (
        "img", True, ["pyjokes==0.8.2"]
    )

    ExperimentFactory(environment=jokes)
    in_use = client.get(f"/environments/{jokes.pk}/").content.decode()
    assert 'id="delete-environment"' not in in_use and "Used by 1 experiment:" in in_use
    refused = client.post(f"/environments/{jokes.pk}/delete/", follow=True).content.decode()
    assert "only an unused environment can be deleted" in refused
    unused = EnvironmentFactory(name="unused")
    assert client.post(f"/environments/{unused.pk}/delete/").status_code == 302
    assert not Environment.objects.filter(pk=unused.pk).exists()


def test_only_staff_see_the_environment_pages() -> None:
    jokes = EnvironmentFactory(name="jokes")
    build = EnvironmentBuild.objects.create(environment=jokes, node=NodeFactory(), key="k")
    user = logged_in(UserFactory())
    paths = (
        "/environments/",
        "/environments/new/",
        f"/environments/{jokes.pk}/",
        f"/environments/builds/{build.pk}/",
    )
    for path in paths:
        assert user.get(path).status_code == 404
        assert Client().get(path).status_code == 302  # to the login page
    assert user.post(f"/environments/{jokes.pk}/delete/").status_code == 404
    assert Environment.objects.filter(pk=jokes.pk).exists()
    assert 'href="/environments/"' not in user.get("/experiments/").content.decode()
    assert 'href="/environments/"' in staff().get("/experiments/").content.decode()


def _field(html: str, name: str) -> str:
    """One form field's block: its input, help and errors."""
    block = html[html.index(f'id="field-{name}"'):]
    return block[: block.index("</div>")]
