import pytest
from django.test import Client

from tests.factories import PASSWORD, ExperimentFactory, UserFactory
from tfplatform.experiments.models import Experiment

pytestmark = pytest.mark.django_db

FORM = {
    "name": "from the form",
    "model": "mlp",
    "dataset": "digits",
    "epochs": 3,
    "batch_size": 32,
    "learning_rate": 0.01,
    "optimizer": "adam",
    "workers": 1,
    "gpus_per_worker": 0,
    "parameter_servers": 0,
    "priority": 0,
    "max_restarts": 1,
}


def logged_in(user: object) -> Client:
    client = Client(enforce_csrf_checks=False)
    client.force_login(user)
    return client


def test_pages_need_login() -> None:
    response = Client().get("/experiments/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_login_with_password_and_csrf() -> None:
    user = UserFactory()
    client = Client(enforce_csrf_checks=True)
    page = client.get("/login/")
    token = page.cookies["csrftoken"].value
    response = client.post(
        "/login/", {"username": user.username, "password": PASSWORD, "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302
    assert client.get("/experiments/").status_code == 200
    assert (
        Client(enforce_csrf_checks=True)
        .post("/login/", {"username": user.username, "password": PASSWORD})
        .status_code
        == 403
    )


def test_new_experiment_form_creates_and_shows_it() -> None:
    user = UserFactory()
    client = logged_in(user)
    assert b"New experiment" in client.get("/experiments/new/").content
    response = client.post("/experiments/new/", FORM)
    assert response.status_code == 302
    experiment = Experiment.objects.get(owner=user)
    assert response["Location"] == f"/experiments/{experiment.pk}/"
    assert experiment.hyperparameters["epochs"] == 3
    detail = client.get(response["Location"]).content.decode()
    assert "from the form" in detail and "queued" in detail
    assert "from the form" in client.get("/experiments/").content.decode()


def test_form_shows_field_errors_inline() -> None:
    client = logged_in(UserFactory())
    response = client.post("/experiments/new/", {**FORM, "workers": 0, "model": "bogus"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "field-error" in html
    assert "Select a valid choice" in html
    assert Experiment.objects.count() == 0


def test_form_business_error_lands_on_field() -> None:
    client = logged_in(UserFactory())
    response = client.post("/experiments/new/", {**FORM, "model": "upload"})
    assert response.status_code == 200
    assert "needs a model_file" in response.content.decode()


def test_other_users_experiment_page_is_404_and_cannot_be_canceled() -> None:
    experiment = ExperimentFactory()
    intruder = logged_in(UserFactory())
    assert intruder.get(f"/experiments/{experiment.pk}/").status_code == 404
    assert intruder.post(f"/experiments/{experiment.pk}/cancel/").status_code == 404
    assert experiment.name not in intruder.get("/experiments/").content.decode()
    experiment.refresh_from_db()
    assert experiment.state == "queued"


def test_owner_cancels_from_the_page() -> None:
    experiment = ExperimentFactory()
    client = logged_in(experiment.owner)
    client.post(f"/experiments/{experiment.pk}/cancel/")
    experiment.refresh_from_db()
    assert experiment.state == "canceled"


def test_healthz() -> None:
    assert Client().get("/healthz").json() == {"status": "ok"}


def test_admin_registers_every_model() -> None:
    from django.apps import apps
    from django.contrib import admin

    ours = [
        m
        for m in apps.get_models()
        if m._meta.app_label in ("accounts", "cluster", "experiments", "modelregistry")
    ]
    missing = [m.__name__ for m in ours if not admin.site.is_registered(m)]
    assert missing == []


def test_form_uploads_a_model_module_and_rejects_a_broken_one() -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    user = UserFactory()
    client = logged_in(user)
    module = b"def build_model(hparams):\n    import tf_keras\n    return tf_keras.Sequential()\n"
    response = client.post(
        "/experiments/new/",
        {
            **FORM,
            "model": "upload",
            "model_file": SimpleUploadedFile("mine.py", module),
        },
    )
    assert response.status_code == 302
    assert Experiment.objects.get(owner=user).model_file.read() == module
    broken = client.post(
        "/experiments/new/",
        {
            **FORM,
            "model": "upload",
            "model_file": SimpleUploadedFile("bad.py", b"def build_model(:\n"),
        },
    )
    assert broken.status_code == 200
    assert "SyntaxError" in broken.content.decode()
    assert Experiment.objects.filter(owner=user).count() == 1
