"""Tags, notes and archiving: one experiment through PATCH, many through the bulk endpoint."""

import pytest
from rest_framework.test import APIClient

from tests.factories import ExperimentFactory, TeamFactory, UserFactory
from tfplatform.core.notes import note_render
from tfplatform.experiments.models import Experiment, ExperimentTag

pytestmark = pytest.mark.django_db


def client_for(user: object) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    return client


def tags_of(experiment: Experiment) -> list[str]:
    return sorted(ExperimentTag.objects.filter(experiment=experiment)
                  .values_list("name", flat=True))


def test_a_teammate_tags_and_notes_an_experiment_and_the_list_shows_the_tags() -> None:
    team = TeamFactory()
    experiment = ExperimentFactory(owner=UserFactory(team=team))
    client = client_for(UserFactory(team=team))
    response = client.patch(f"/api/v1/experiments/{experiment.pk}/", {
        "tags": ["baseline", " prod ", "baseline"], "note": "# Result\nBeat **v1**."},
        format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["tags"] == ["baseline", "prod"]
    assert body["note"] == "# Result\nBeat **v1**."
    assert body["note_html"] == "<h1>Result</h1>\n<p>Beat <strong>v1</strong>.</p>\n"
    listed = client.get("/api/v1/experiments/").json()["results"]
    assert listed[0]["tags"] == ["baseline", "prod"] and listed[0]["archived"] is False
    # Replacing the tags drops the ones not given; the note stays when not given.
    client.patch(f"/api/v1/experiments/{experiment.pk}/", {"tags": ["prod"]}, format="json")
    experiment.refresh_from_db()
    assert tags_of(experiment) == ["prod"] and experiment.note.startswith("# Result")


def test_archiving_hides_it_from_the_list_until_asked_for() -> None:
    owner = UserFactory()
    experiment = ExperimentFactory(owner=owner)
    client = client_for(owner)
    client.patch(f"/api/v1/experiments/{experiment.pk}/", {"archived": True}, format="json")
    assert client.get("/api/v1/experiments/").json()["count"] == 0
    assert client.get("/api/v1/experiments/?archived=true").json()["count"] == 1
    # Still there by id: archiving hides, it does not delete.
    assert client.get(f"/api/v1/experiments/{experiment.pk}/").status_code == 200


@pytest.mark.parametrize("body", [
    {"tags": ["x" * 10_000]},
    {"tags": ["two words"]},
    {"tags": ["-leading"]},
    {"tags": [""]},
    {"tags": "prod"},
    {"tags": [f"t{i}" for i in range(51)]},
    {"note": "x" * 50_001},
    {"note": "nul\x00"},
    {"archived": "perhaps"},
    {"name": "renamed"},
])
def test_bad_annotations_are_field_errors_and_change_nothing(body: dict[str, object]) -> None:
    owner = UserFactory()
    experiment = ExperimentFactory(owner=owner, note="kept")
    response = client_for(owner).patch(f"/api/v1/experiments/{experiment.pk}/", body,
                                       format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_input"
    experiment.refresh_from_db()
    assert experiment.note == "kept" and experiment.name != "renamed"
    assert tags_of(experiment) == []


def test_another_teams_user_can_neither_read_nor_annotate() -> None:
    experiment = ExperimentFactory(owner=UserFactory(team=TeamFactory()), note="ours")
    stranger = client_for(UserFactory(team=TeamFactory()))
    assert stranger.get(f"/api/v1/experiments/{experiment.pk}/").status_code == 404
    response = stranger.patch(f"/api/v1/experiments/{experiment.pk}/",
                              {"note": "theirs", "tags": ["pwned"]}, format="json")
    assert response.status_code == 404
    response = stranger.post("/api/v1/experiments/bulk/",
                             {"ids": [experiment.pk], "action": "archive"}, format="json")
    assert response.status_code == 404
    experiment.refresh_from_db()
    assert experiment.note == "ours" and not experiment.archived and tags_of(experiment) == []


def test_bulk_tags_untags_and_archives_all_or_none() -> None:
    owner = UserFactory()
    mine = [ExperimentFactory(owner=owner) for _ in range(3)]
    other = ExperimentFactory(owner=UserFactory())
    client = client_for(owner)
    ids = [e.pk for e in mine]
    response = client.post("/api/v1/experiments/bulk/",
                           {"ids": ids, "action": "tag", "tags": ["sweep", "v2"]}, format="json")
    assert response.status_code == 200 and response.json() == {"changed": 3}
    assert all(tags_of(e) == ["sweep", "v2"] for e in mine)
    client.post("/api/v1/experiments/bulk/",
                {"ids": ids[:2], "action": "untag", "tags": ["v2"]}, format="json")
    assert [tags_of(e) for e in mine] == [["sweep"], ["sweep"], ["sweep", "v2"]]
    # One id not the user's: nothing is archived, and the answer names only that id.
    response = client.post("/api/v1/experiments/bulk/",
                           {"ids": [*ids, other.pk], "action": "archive"}, format="json")
    assert response.status_code == 404 and str(other.pk) in response.json()["error"]
    assert not Experiment.objects.filter(archived=True).exists()
    client.post("/api/v1/experiments/bulk/", {"ids": ids, "action": "archive"}, format="json")
    assert Experiment.objects.filter(archived=True).count() == 3


@pytest.mark.parametrize("body", [
    {"ids": [], "action": "archive"},
    {"ids": [1], "action": "delete"},
    {"ids": [1], "action": "tag"},
    {"ids": ["x"], "action": "archive"},
    {"ids": list(range(1, 502)), "action": "archive"},
    {"ids": [1], "action": "tag", "tags": ["bad tag"]},
])
def test_a_bad_bulk_request_is_a_field_error(body: dict[str, object]) -> None:
    owner = UserFactory()
    ExperimentFactory(owner=owner, pk=1)
    response = client_for(owner).post("/api/v1/experiments/bulk/", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_input"


@pytest.mark.parametrize(("note", "absent"), [
    ("<script>alert(1)</script>", "<script"),
    ("[x](javascript:alert(1))", 'href="javascript'),
    ("[x](JaVaScRiPt:alert(1))", "href="),
    ("<a href='javascript:alert(1)'>x</a>", "<a"),
    ("<img src=x onerror=alert(1)>", "<img"),
    ('[x](https://example.org/ "t") **b**', "onclick"),
    ("| a |\n|---|\n| <b onmouseover=x>1</b> |", "<b "),
])
def test_a_note_renders_without_anything_that_runs(note: str, absent: str) -> None:
    html = note_render(note=note)
    assert absent not in html


def test_a_notes_links_open_safely() -> None:
    html = note_render(note="see [the run](https://example.org/run)")
    assert 'href="https://example.org/run"' in html
    assert 'rel="noopener noreferrer nofollow"' in html
