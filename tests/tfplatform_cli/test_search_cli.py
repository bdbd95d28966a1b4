"""`tfp search` against a live server: a spec submitted becomes queued trials; show, list, csv,
cancel; bad specs; and a search followed while its trials train through the services a worker
node uses (the training itself left out) until it completes."""

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.factories import PASSWORD, DeviceFactory, NodeFactory, UserFactory
from tests.tfplatform_cli.conftest import TIMEOUT, Tfp
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services.execution import trial_outcome_record
from tfplatform.experiments.services.recording import TrialEventRecorder
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.experiments.services.trials import trial_start
from tfplatform.searches.models import Search
from tfplatform.searches.services import search_advance
from training.spec import TrialEvent, TrialOutcome

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "digits_search.yaml"

GRID_SPEC = """\
name: cli grid
model: mlp
dataset: digits
hyperparameters: {epochs: 1}
searcher: grid
space:
  hidden_units: {values: [16, 32]}
max_concurrent: 2
"""


def signed_in(tfp: Callable[[str], Tfp], server: str, name: str) -> Tfp:
    UserFactory(username=name)
    user = tfp(name)
    logged_in = user("login", "--server", server, "--username", name, "--password-stdin",
                     stdin=PASSWORD)
    assert logged_in.returncode == 0, logged_in.stderr
    return user


def test_the_docs_show_the_example_spec() -> None:
    readme = (ROOT / "docs" / "user-guide" / "cli.md").read_text()
    block = readme.split("cat > digits_search.yaml <<'YAML'\n", 1)[1].split("\nYAML\n", 1)[0]
    assert yaml.safe_load(block) == yaml.safe_load(EXAMPLE.read_text())


def test_the_readme_example_becomes_queued_trials_shown_listed_exported_and_canceled(
    live_server: Any, tfp: Callable[[str], Tfp], tmp_path: Path
) -> None:
    alice = signed_in(tfp, live_server.url, "alice")
    submitted = alice("search", "submit", str(EXAMPLE))
    assert submitted.returncode == 0, submitted.stderr
    search = Search.objects.get(pk=int(submitted.stdout))
    assert (search.searcher, search.max_trials, search.max_epochs) == ("adaptive", 9, 9)
    trials = list(search.trials.select_related("experiment").order_by("index"))
    assert [t.experiment.state for t in trials] == ["queued"] * 3  # max_concurrent
    assert submitted.stderr == (f"search {search.pk}: 3 of 9 trials submitted (experiments "
                                f"{', '.join(str(t.experiment_id) for t in trials)})\n")
    for trial in trials:
        assert 1e-4 <= trial.params["learning_rate"] <= 0.1
        assert trial.params["hidden_units"] in (32, 64, 128)
        assert trial.experiment.hyperparameters["epochs"] == 1  # the first rung's

    shown = alice("search", "show", str(search.pk)).stdout.splitlines()
    assert shown[0].split() == ["search", str(search.pk), "digits-mlp-search"]
    assert shown[1].split() == ["state", "running"]
    assert "none yet (no completed trial with a value of val_accuracy)" in shown[6]
    header, *rows = shown[shown.index("") + 1:]
    assert header.split() == ["TRIAL", "EXPERIMENT", "PARAMS", "STATE", "OUTCOME", "RUNG",
                              "EPOCHS", "BEST", "VAL_ACCURACY"]
    assert [row.split()[:2] for row in rows] == [[str(t.index), str(t.experiment_id)]
                                                 for t in trials]
    assert all(row.split()[-5:] == ["queued", "-", "0", "0", "-"] for row in rows)
    assert json.loads(alice("search", "show", str(search.pk), "--json").stdout)["trials"][0][
        "params"] == trials[0].params

    listed = alice("search", "list").stdout.splitlines()
    assert listed[0].split()[:4] == ["ID", "NAME", "STATE", "SEARCHER"]
    assert listed[1].split()[:4] == [str(search.pk), "digits-mlp-search", "running", "adaptive"]
    assert [s["id"] for s in json.loads(alice("search", "list", "--json").stdout)] == [search.pk]

    exported = list(csv.reader(io.StringIO(alice("search", "csv", str(search.pk)).stdout)))
    assert exported[0][:2] == ["trial", "experiment"]
    assert sorted(exported[0][2:4]) == ["hidden_units", "learning_rate"]  # a column each
    assert [row[0] for row in exported[1:]] == ["0", "1", "2"]
    saved = alice("search", "csv", str(search.pk), "-o", str(tmp_path))
    assert saved.stdout == f"{tmp_path / f'search-{search.pk}.csv'} (3 trials)\n"
    assert list(csv.reader((tmp_path / f"search-{search.pk}.csv").open())) == exported

    bob = signed_in(tfp, live_server.url, "bob")
    assert bob("search", "list").stdout == "No searches.\n"
    for args in (("show",), ("csv",), ("cancel",), ("deploy-best", "--model-name", "x")):
        refused = bob("search", *args[:1], str(search.pk), *args[1:])
        assert (refused.returncode, refused.stderr) == (
            1, f"error: search {search.pk} not found\n"), args

    undeployable = alice("search", "deploy-best", str(search.pk), "--model-name", "digits")
    assert (undeployable.returncode, undeployable.stderr) == (1, (
        "error: No trial of this search has completed with a value of its metric yet.\n"))

    canceled = alice("search", "cancel", str(search.pk))
    assert (canceled.returncode, canceled.stdout) == (0, f"search {search.pk} canceled\n")
    assert set(Experiment.objects.filter(search_trial__search=search)
               .values_list("state", flat=True)) == {"canceled"}
    again = alice("search", "cancel", str(search.pk))
    assert (again.returncode, again.stderr) == (1, "error: The search is already canceled.\n")
    # Following a search that has ended prints its trials as they ended, and fails when
    # it was canceled.
    followed = alice("search", "follow", str(search.pk))
    assert followed.returncode == 1
    assert followed.stderr == f"error: search {search.pk} canceled: Canceled by alice.\n"
    assert followed.stdout.splitlines()[0].startswith(
        f"trial 0 (experiment {trials[0].experiment_id}) canceled, rung 0: hidden_units=")


def test_bad_search_specs_are_refused_with_the_field_errors(
    live_server: Any, tfp: Callable[[str], Tfp], tmp_path: Path
) -> None:
    user = signed_in(tfp, live_server.url, "erin")

    def submit(name: str, text: str, *command: str) -> str:
        spec = tmp_path / name
        spec.write_text(text)
        result = user(*(command or ("search", "submit")), str(spec))
        assert (result.returncode, result.stdout) == (1, ""), result.stderr
        return result.stderr

    broken = submit("broken.yaml", "name: x\nsearch: {searcher: grid\n")
    assert broken.startswith(f"error: {tmp_path / 'broken.yaml'} is not valid YAML:")
    assert "is not valid JSON: " in submit("bad.json", '{"name": "x",')
    assert "the spec must be a mapping" in submit("list.yaml", "- name: x\n")
    base = "name: x\nmodel: mlp\ndataset: digits\n"
    assert submit("section.yaml", base + "search: grid\n") == (
        f"error: {tmp_path / 'section.yaml'}: search must be a mapping of fields "
        "(searcher, space, metric, max_trials, ...)\n")
    assert submit("twice.yaml", base + "max_trials: 2\nsearch: {max_trials: 3}\n") == (
        f"error: {tmp_path / 'twice.yaml'}: max_trials both at the top level and under search: "
        "give each once\n")
    assert submit("upload.yaml", base + "model_file: m.py\nsearch: {searcher: grid}\n").startswith(
        f"error: {tmp_path / 'upload.yaml'}: model_file: a search's trials train a model")

    searcher = submit("searcher.yaml", base + "search: {searcher: bayes, space: {}}\n")
    assert searcher.startswith("error: Invalid input.\n  searcher: ")
    typo = submit("typo.yaml", base + "search: {searcher: grid, space: {hidden_units: "
                  "{values: [8]}}, epochs: 2}\n")
    assert typo == "error: Invalid input.\n  epochs: Unknown field.\n"
    out_of_range = submit("range.yaml", base + "search: {searcher: random, space: "
                          "{learning_rate: {low: 0.1, high: 100}}}\n")
    assert out_of_range.startswith("error: space: space.learning_rate: "), out_of_range
    # An experiment's command given a search spec says which command takes it.
    misdirected = submit("search.yaml", base + "search: {searcher: grid}\n", "submit")
    assert misdirected == (f"error: {tmp_path / 'search.yaml'} is a search spec: submit it with "
                           "`tfp search submit`\n")
    assert Search.objects.count() == 0 and Experiment.objects.count() == 0

    missing = user("search", "show", "999999")
    assert (missing.returncode, missing.stderr) == (1, "error: search 999999 not found\n")
    assert user("search", "deploy-best", "1").returncode == 2  # --model-name is required


def trained(trial: Trial, *, value: float) -> None:
    """One epoch of a trial, as a worker node reports it, then its end."""
    trial_start(trial_id=trial.pk)
    experiment_transition(experiment=trial.experiment, to=Experiment.State.RUNNING)
    TrialEventRecorder(trial=trial)(
        [TrialEvent(kind="metric", payload={"epoch": 1, "val_accuracy": value})])
    trial_outcome_record(trial=trial, outcome=TrialOutcome(
        status="completed", retryable=False, exit_reason="completed"))


def test_follow_prints_each_trials_changes_then_the_end_and_the_best_trial(
    live_server: Any, tfp: Callable[[str], Tfp], tmp_path: Path
) -> None:
    node = NodeFactory()
    for index in range(2):
        DeviceFactory(node=node, kind="cpu", index=index)
    alice = signed_in(tfp, live_server.url, "alice")
    spec = tmp_path / "grid.yaml"
    spec.write_text(GRID_SPEC)
    search_id = int(alice("search", "submit", str(spec)).stdout)
    follower = alice.popen("search", "follow", str(search_id))
    try:
        assert follower.stdout is not None and follower.stderr is not None
        started = [follower.stdout.readline(), follower.stdout.readline()]
        assert follower.stderr.readline() == f"search {search_id} running\n"
        assert scheduler_pass() == 2
        first, second = (Trial.objects.get(experiment__search_trial__search_id=search_id,
                                            experiment__search_trial__index=index)
                         for index in range(2))
        trained(first, value=0.8)
        trained(second, value=0.9)
        search_advance(search_id=search_id)  # what the experiments' ends enqueue for a worker
        out, notes = follower.communicate(timeout=TIMEOUT)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, notes
    one, two = first.experiment_id, second.experiment_id
    assert started == [f"trial 0 (experiment {one}) queued: hidden_units=16\n",
                       f"trial 1 (experiment {two}) queued: hidden_units=32\n"]
    lines = out.splitlines()
    assert f"trial 0 (experiment {one}) finished: best val_accuracy 0.8 at epoch 1" in lines
    assert lines[-2:] == [
        f"trial 1 (experiment {two}) finished: best val_accuracy 0.9 at epoch 1",
        f"best trial 1 (experiment {two}): val_accuracy 0.9 at epoch 1; hidden_units=32",
    ]
    assert notes.splitlines() == [
        f"search {search_id} completed: Every point of its grid trained: 2 finished, 0 stopped "
        "at a rung, 0 failed, 0 canceled.",
    ]
    rows = alice("search", "show", str(search_id)).stdout.splitlines()
    assert rows[-3].split()[:2] == ["0", str(one)] and rows[-2].split()[:2] == ["1*", str(two)]
    assert rows[-1] == "* best trial (deploy-best deploys it)"
