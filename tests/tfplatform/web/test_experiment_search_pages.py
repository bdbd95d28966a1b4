"""The experiments list's search form and bulk buttons, and the detail page's tags and note."""

import pytest
from django.test import Client

from tests.factories import (
    ExperimentFactory,
    MetricFactory,
    TeamFactory,
    TrialFactory,
    UserFactory,
)
from tfplatform.experiments.models import Experiment, ExperimentTag

pytestmark = pytest.mark.django_db


def logged_in(user: object) -> Client:
    client = Client()
    client.force_login(user)
    return client


def tagged(owner: object, name: str, tags: list[str], **fields: object) -> Experiment:
    experiment = ExperimentFactory(owner=owner, name=name, **fields)
    ExperimentTag.objects.bulk_create(
        [ExperimentTag(experiment=experiment, name=tag) for tag in tags])
    return experiment


def test_the_form_searches_with_the_apis_filters_and_keeps_what_was_asked() -> None:
    owner = UserFactory()
    tagged(owner, "resnet-fast", ["prod"], hyperparameters={"lr": 0.001, "epochs": 1})
    tagged(owner, "resnet-slow", ["prod"], hyperparameters={"lr": 0.1, "epochs": 1})
    tagged(owner, "mlp-archived", ["prod"], archived=True)
    html = logged_in(owner).get(
        "/experiments/", {"q": "resnet", "tag": "prod", "hp": "lr<0.01 epochs=1"}
    ).content.decode()
    assert "resnet-fast" in html and "resnet-slow" not in html and "mlp-archived" not in html
    assert 'value="lr&lt;0.01 epochs=1"' in html
    html = logged_in(owner).get("/experiments/", {"archived": "true"}).content.decode()
    assert "mlp-archived" in html and "resnet-fast" not in html
    # The tag cloud counts the user's tags.
    assert '<a href="?tag=prod">prod</a> <span>3</span>' in html


def test_the_sort_field_orders_the_rows_by_a_best_metric_runs_without_it_last() -> None:
    owner = UserFactory()
    # Made in an order neither newest-first nor oldest-first matches; "run-high" is the best
    # by its best epoch but not by its final one.
    for name, values in (("run-low", [0.5, 0.6]), ("run-none", []),
                         ("run-high", [0.7, 0.95, 0.8]), ("run-mid", [0.85])):
        trial = TrialFactory(experiment=ExperimentFactory(owner=owner, name=name))
        for epoch, value in enumerate(values):
            MetricFactory(trial=trial, name="val_accuracy", epoch=epoch, value=value)
    html = logged_in(owner).get("/experiments/",
                                {"ordering": "-best.val_accuracy"}).content.decode()
    assert 'name="ordering" value="-best.val_accuracy"' in html
    assert sorted(("run-high", "run-mid", "run-low", "run-none"),
                  key=lambda name: html.index(f">{name}</a>")) == [
        "run-high", "run-mid", "run-low", "run-none"]


def test_a_malformed_filter_is_said_on_the_page_not_a_server_error() -> None:
    response = logged_in(UserFactory()).get("/experiments/", {"hp": "lr<<1", "state": "done"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "compares numbers" in html and "Not a state" in html


def test_bulk_buttons_tag_archive_and_compare_the_ticked_rows() -> None:
    owner = UserFactory()
    first, second = ExperimentFactory(owner=owner), ExperimentFactory(owner=owner)
    client = logged_in(owner)
    response = client.post("/experiments/bulk/", {
        "ids": [first.pk, second.pk], "action": "tag", "tags": "sweep, v2",
        "query": "q=x&next=https://evil.example/"})
    assert response.status_code == 302
    # Back to the list with its own query only: never somewhere the form named.
    assert response["Location"] == "/experiments/?q=x"
    assert set(ExperimentTag.objects.values_list("name", flat=True)) == {"sweep", "v2"}
    response = client.post("/experiments/bulk/", {"ids": [first.pk, second.pk],
                                                   "action": "compare"})
    assert response["Location"] == f"/experiments/compare/?ids={first.pk}&ids={second.pk}"
    client.post("/experiments/bulk/", {"ids": [first.pk], "action": "archive"})
    assert list(Experiment.objects.filter(archived=True)) == [first]


def test_bulk_on_another_teams_experiment_changes_nothing() -> None:
    theirs = ExperimentFactory(owner=UserFactory(team=TeamFactory()))
    client = logged_in(UserFactory(team=TeamFactory()))
    response = client.post("/experiments/bulk/", {"ids": [theirs.pk], "action": "archive"})
    assert response.status_code == 404
    response = client.post(f"/experiments/{theirs.pk}/annotate/", {"note": "mine now"})
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert not theirs.archived and theirs.note == ""


def test_the_detail_page_edits_tags_and_note_and_shows_the_note_safely() -> None:
    owner = UserFactory()
    experiment = ExperimentFactory(owner=owner)
    client = logged_in(owner)
    response = client.post(f"/experiments/{experiment.pk}/annotate/", {
        "tags": "baseline prod", "note": "Best so far.\r\n\r\n<script>alert(1)</script>"})
    assert response.status_code == 302
    html = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert "<p>Best so far.</p>" in html and "<script>alert(1)" not in html
    assert "?tag=baseline" in html and "?tag=prod" in html
    client.post(f"/experiments/{experiment.pk}/annotate/", {"archived": "true"})
    experiment.refresh_from_db()
    assert experiment.archived and experiment.note.startswith("Best so far.\n\n")
    # A bad tag is said back on the page; nothing changes.
    response = client.post(f"/experiments/{experiment.pk}/annotate/", {"tags": "x" * 100},
                           follow=True)
    assert "is not a tag" in response.content.decode()
    assert sorted(ExperimentTag.objects.values_list("name", flat=True)) == ["baseline", "prod"]
