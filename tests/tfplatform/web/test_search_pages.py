from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.crafted_models import saved_model_save
from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.web.search_driving import search_launch, trial_train
from tfplatform.modelregistry.models import ModelVersion
from tfplatform.modelregistry.services.publish import experiment_export_dir
from tfplatform.searches.models import Search

pytestmark = pytest.mark.django_db

FORM = {
    "name": "from the form",
    "model": "mlp",
    "dataset": "digits",
    "searcher": "random",
    "metric": "val_accuracy",
    "mode": "",
    "max_trials": 4,
    "max_concurrent": 2,
    "max_epochs": 2,
    "grace_period": 1,
    "reduction_factor": 3,
    "seed": 0,
    "hyperparameters": '{"batch_size": 64}',
    "workers": 1,
    "gpus_per_worker": 0,
    "parameter_servers": 0,
    "priority": 0,
    "max_restarts": 1,
    "space-TOTAL_FORMS": 3,
    "space-INITIAL_FORMS": 0,
    "space-MIN_NUM_FORMS": 0,
    "space-MAX_NUM_FORMS": 20,
    "space-0-name": "learning_rate",
    "space-0-kind": "float",
    "space-0-low": "0.0001",
    "space-0-high": "0.1",
    "space-0-log": "on",
    "space-1-name": "optimizer",
    "space-1-kind": "choice",
    "space-1-values": "adam, sgd",
    "space-2-name": "",
    "space-2-kind": "choice",
}


def logged_in(user: object) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_new_search_form_creates_it_with_its_space() -> None:
    user = UserFactory()
    client = logged_in(user)
    page = client.get("/searches/new/").content.decode()
    assert 'name="space-0-name"' in page and "learning_rate" in page
    response = client.post("/searches/new/", FORM)
    assert response.status_code == 302
    search = Search.objects.get(owner=user)
    assert response["Location"] == f"/searches/{search.pk}/"
    assert search.space == {"learning_rate": {"type": "float", "low": 0.0001, "high": 0.1,
                                              "log": True},
                            "optimizer": {"values": ["adam", "sgd"]}}
    assert (search.max_trials, search.max_concurrent, search.max_epochs) == (4, 2, 2)
    assert search.hyperparameters == {"batch_size": 64}
    assert search.trials.count() == 2  # max_concurrent of them submitted at once


def test_form_shows_field_and_row_errors_inline() -> None:
    client = logged_in(UserFactory())
    response = client.post("/searches/new/", {
        **FORM, "max_concurrent": 0, "hyperparameters": "{not json",
        "space-0-high": "", "space-1-values": " , ",
    })
    assert response.status_code == 200
    html = response.content.decode()
    assert "Ensure this value is greater than or equal to 1" in html
    assert "Not JSON" in html
    assert "A range needs both ends." in html
    assert "List its values, separated by commas." in html
    assert Search.objects.count() == 0


def test_service_errors_land_on_the_space_row_and_fields() -> None:
    client = logged_in(UserFactory())
    response = client.post("/searches/new/", {**FORM, "space-0-low": "0", "searcher": "random"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "space.learning_rate: a log scale needs low &gt; 0." in html
    assert 'class="space-row-errors"' in html
    grid = client.post("/searches/new/", {**FORM, "searcher": "grid"}).content.decode()
    assert "A grid search needs a list of values for &#x27;learning_rate&#x27;" in grid
    repeated = client.post("/searches/new/", {**FORM, "space-1-name": "learning_rate"})
    assert "learning_rate appears more than once" in repeated.content.decode()
    assert Search.objects.count() == 0


def test_list_detail_and_experiment_link_back() -> None:
    user = UserFactory()
    search = search_launch(owner=user)
    first, second = search.trials.order_by("index")
    trial_train(member=first, values=[0.5, 0.8])
    trial_train(member=second, values=[0.6, 0.7])
    client = logged_in(user)

    listing = client.get("/searches/").content.decode()
    assert "lr sweep" in listing and f'href="/searches/{search.pk}/"' in listing
    assert "2 / 3" in listing and "0.8000" in listing

    detail = client.get(f"/searches/{search.pk}/").content.decode()
    assert 'id="trial-0" data-state="completed" class="best"' in detail
    assert f'href="/experiments/{first.experiment_id}/"' in detail
    assert 'id="search-chart-0"' in detail and 'id="search-chart-1"' in detail
    assert f'href="/api/v1/searches/{search.pk}/trials.csv"' in detail
    assert 'id="cancel"' in detail and 'id="deploy"' in detail
    assert "search-chart-data" in detail

    live = client.get(f"/searches/{search.pk}/live/").content.decode()
    assert 'id="trial-2"' in live and "hx-trigger" in live  # the third trial was started

    experiment = client.get(f"/experiments/{first.experiment_id}/").content.decode()
    assert f'href="/searches/{search.pk}/"' in experiment and "trial 0 of search" in experiment
    assert client.get(f"/api/v1/searches/{search.pk}/trials.csv").status_code == 200


def test_owner_cancels_from_the_page() -> None:
    search = search_launch(owner=UserFactory())
    client = logged_in(search.owner)
    response = client.post(f"/searches/{search.pk}/cancel/", follow=True)
    assert "Search canceled" in response.content.decode()
    search.refresh_from_db()
    assert search.state == "canceled"
    assert {m.experiment.state for m in search.trials.all()} == {"canceled"}
    again = client.post(f"/searches/{search.pk}/cancel/", HTTP_REFERER=f"/searches/{search.pk}/",
                        follow=True)
    assert "The search is already canceled." in again.content.decode()


def test_deploy_best_without_a_completed_trial_says_so() -> None:
    search = search_launch(owner=UserFactory())
    client = logged_in(search.owner)
    response = client.post(f"/searches/{search.pk}/deploy-best/", {"model_name": "best"},
                           follow=True)
    assert "No trial of this search has completed" in response.content.decode()


def test_other_users_search_is_404_everywhere() -> None:
    search = search_launch(owner=UserFactory())
    intruder = logged_in(UserFactory())
    for url in (f"/searches/{search.pk}/", f"/searches/{search.pk}/live/"):
        assert intruder.get(url).status_code == 404
    for url in (f"/searches/{search.pk}/cancel/", f"/searches/{search.pk}/deploy-best/"):
        assert intruder.post(url, {"model_name": "x"}).status_code == 404
    assert "lr sweep" not in intruder.get("/searches/").content.decode()
    search.refresh_from_db()
    assert search.state == "running"


def test_search_pages_need_login_and_nav_links_them() -> None:
    assert Client().get("/searches/")["Location"].startswith("/login/")
    page = logged_in(UserFactory()).get("/experiments/").content.decode()
    assert 'href="/searches/"' in page


def test_deploy_best_publishes_the_best_completed_trial(tmp_path: Path, settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(work_dir=tmp_path / "work", model_base_path=tmp_path / "models")
    search = search_launch(owner=UserFactory(), max_trials=2)
    worse, better = search.trials.order_by("index")
    trial_train(member=worse, values=[0.5, 0.6])
    trial_train(member=better, values=[0.7, 0.9])
    export = experiment_export_dir(experiment=better.experiment)
    export.parent.mkdir(parents=True)
    saved_model_save(doubler(), export)
    client = logged_in(search.owner)
    response = client.post(f"/searches/{search.pk}/deploy-best/", {"model_name": "swept"},
                           follow=True)
    assert response.redirect_chain[-1][0] == "/models/swept/"
    assert "Deploying the best trial as swept version 1" in response.content.decode()
    version = ModelVersion.objects.get(model__name="swept")
    assert version.source_experiment_id == better.experiment_id


def test_deploy_best_can_convert_to_tflite(tmp_path: Path, settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(work_dir=tmp_path / "work", model_base_path=tmp_path / "models")
    search = search_launch(owner=UserFactory(), max_trials=1)
    (only,) = search.trials.all()
    trial_train(member=only, values=[0.8])
    export = experiment_export_dir(experiment=only.experiment)
    export.parent.mkdir(parents=True)
    saved_model_save(doubler(), export)
    client = logged_in(search.owner)
    assert 'id="deploy-tflite"' in client.get(f"/searches/{search.pk}/").content.decode()
    response = client.post(f"/searches/{search.pk}/deploy-best/",
                           {"model_name": "swept-lite", "tflite": "on"})
    assert response.status_code == 302
    version = ModelVersion.objects.get(model__name="swept-lite")
    assert version.tflite
    assert (Path(version.path) / "model.tflite").is_file()
    # And over the API, where it is off unless asked.
    api = client.post(f"/api/v1/searches/{search.pk}/deploy-best/",
                      {"model_name": "swept-plain"}, content_type="application/json")
    assert api.status_code == 202, api.content
    assert api.json()["tflite"] is False


def doubler() -> object:
    """A tiny SavedModel's module: a trial's export stand-in."""
    import tensorflow as tf

    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": 2 * x}

    return Doubler()
