"""Searches carry tags and a note too; the list finds them by words, tags and archived."""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import SearchFactory, TeamFactory, UserFactory
from tfplatform.searches.models import SearchTag

pytestmark = pytest.mark.django_db


def api_for(user: object) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    return client


def test_a_teammate_tags_notes_and_archives_a_search_and_the_list_finds_it() -> None:
    team = TeamFactory()
    search = SearchFactory(owner=UserFactory(team=team), name="lr sweep")
    other = SearchFactory(owner=search.owner, name="depth sweep")
    client = api_for(UserFactory(team=team))
    response = client.patch(f"/api/v1/searches/{search.pk}/",
                            {"tags": ["vision", "q3"], "note": "Winner: *lr 3e-3*"},
                            format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["note_html"] == "<p>Winner: <em>lr 3e-3</em></p>\n"
    assert response.json()["tags"] == ["q3", "vision"]

    def listed(query: str) -> list[int]:
        return [s["id"] for s in client.get(f"/api/v1/searches/?{query}").json()["results"]]

    assert listed("tag=vision") == [search.pk]
    assert listed("q=winner") == [search.pk]
    assert listed("q=sweep") == [other.pk, search.pk]
    client.patch(f"/api/v1/searches/{search.pk}/", {"archived": True}, format="json")
    assert listed("") == [other.pk]
    assert listed("archived=true") == [search.pk]


def test_another_teams_user_neither_finds_nor_annotates_a_search() -> None:
    search = SearchFactory(owner=UserFactory(team=TeamFactory()), note="ours")
    SearchTag.objects.create(search=search, name="secret")
    stranger = api_for(UserFactory(team=TeamFactory()))
    assert stranger.get("/api/v1/searches/?tag=secret").json()["count"] == 0
    response = stranger.patch(f"/api/v1/searches/{search.pk}/", {"note": "x"}, format="json")
    assert response.status_code == 404
    search.refresh_from_db()
    assert search.note == "ours"


@pytest.mark.parametrize("body", [{"tags": ["a b"]}, {"note": "x" * 50_001},
                                  {"archived": "maybe"}, {"max_trials": 100}])
def test_bad_search_annotations_are_field_errors(body: dict[str, object]) -> None:
    search = SearchFactory()
    response = api_for(search.owner).patch(f"/api/v1/searches/{search.pk}/", body,
                                           format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_input"


def test_the_search_pages_show_and_edit_tags_and_the_note() -> None:
    search = SearchFactory(name="lr sweep")
    client = Client()
    client.force_login(search.owner)
    response = client.post(f"/searches/{search.pk}/annotate/",
                           {"tags": "vision", "note": "**done** <iframe src=x>"})
    assert response.status_code == 302
    html = client.get(f"/searches/{search.pk}/").content.decode()
    assert "<strong>done</strong>" in html and "<iframe" not in html
    assert "/searches/?tag=vision" in html
    assert "lr sweep" in client.get("/searches/", {"tag": "vision"}).content.decode()
    assert "lr sweep" not in client.get("/searches/", {"tag": "other"}).content.decode()
