"""`tfp list` searching, and `tfp tag`, `note`, `archive`, against a live server."""

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.factories import ExperimentFactory, MetricFactory, SearchFactory, TrialFactory
from tests.tfplatform_cli.conftest import Tfp
from tests.tfplatform_cli.test_search_cli import signed_in
from tfplatform.accounts.models import User
from tfplatform.experiments.models import ExperimentTag
from tfplatform.searches.models import SearchTag

pytestmark = pytest.mark.django_db(transaction=True)


def ids(output: str) -> list[int]:
    return [int(line.split()[0]) for line in output.splitlines()[1:]]


def test_list_searches_and_tag_note_archive_change_what_it_finds(
    live_server: Any, tfp: Callable[[str], Tfp], tmp_path: Any
) -> None:
    alice = signed_in(tfp, live_server.url, "alice")
    owner = User.objects.get(username="alice")
    fast = ExperimentFactory(owner=owner, name="fast", hyperparameters={"lr": 0.001})
    slow = ExperimentFactory(owner=owner, name="slow", hyperparameters={"lr": 0.1})
    for experiment, value in ((fast, 0.95), (slow, 0.7)):
        MetricFactory(trial=TrialFactory(experiment=experiment), name="val_accuracy", epoch=1,
                      value=value)

    done = alice("tag", str(fast.pk), str(slow.pk), "--add", "sweep")
    assert done.returncode == 0 and done.stdout == "tagged 2 experiments\n", done.stderr
    assert alice("tag", str(slow.pk), "--remove", "sweep").stdout == "untagged 1 experiment\n"
    listed = alice("list", "--tag", "sweep")
    assert ids(listed.stdout) == [fast.pk] and "sweep" in listed.stdout
    assert ids(alice("list", "--hp", "lr<0.01").stdout) == [fast.pk]
    assert ids(alice("list", "--best", "val_accuracy>=0.9").stdout) == [fast.pk]
    assert ids(alice("list", "--sort", "best.val_accuracy").stdout) == [slow.pk, fast.pk]
    assert ids(alice("list", "-q", "SLO").stdout) == [slow.pk]

    note = tmp_path / "note.md"
    note.write_text("# Why\nlr 1e-3 wins.\n")
    assert alice("note", str(fast.pk), "--file", str(note)).returncode == 0
    assert alice("note", str(fast.pk)).stdout == "# Why\nlr 1e-3 wins.\n"
    assert ids(alice("list", "-q", "wins").stdout) == [fast.pk]

    assert alice("archive", str(fast.pk)).stdout == "archived 1 experiment\n"
    assert ids(alice("list").stdout) == [slow.pk]
    archived = json.loads(alice("list", "--archived", "true", "--json").stdout)
    assert [e["id"] for e in archived] == [fast.pk] and archived[0]["tags"] == ["sweep"]

    search = SearchFactory(owner=owner, note="the lr sweep")
    SearchTag.objects.create(search=search, name="vision")
    SearchFactory(owner=owner)
    found = json.loads(alice("search", "list", "--tag", "vision", "-q", "LR", "--json").stdout)
    assert [s["id"] for s in found] == [search.pk]


def test_bad_input_and_anothers_experiments_are_clear_errors(
    live_server: Any, tfp: Callable[[str], Tfp]
) -> None:
    alice = signed_in(tfp, live_server.url, "alice")
    signed_in(tfp, live_server.url, "bob")
    bobs = ExperimentFactory(owner=User.objects.get(username="bob"))
    refused = alice("list", "--hp", "lr<<1")
    assert refused.returncode == 1 and "hp" in refused.stderr
    refused = alice("tag", str(bobs.pk), "--add", "mine")
    assert refused.returncode == 1 and f"Experiments not found: {bobs.pk}" in refused.stderr
    refused = alice("tag", "1", "--add", "two words")
    assert refused.returncode == 1 and "is not a tag" in refused.stderr
    assert alice("tag", "1").returncode == 2
    assert not ExperimentTag.objects.exists()
