"""Searches through the API and their services: validation, what each trial's end does,
budgets, failures, cancel, and who sees what. Trials' lives are driven by the platform's own
services (conftest.trial_trains); a live worker trains them in test_search_live.py."""

import csv
import io
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import (
    DeviceFactory,
    EnvironmentFactory,
    NodeFactory,
    TeamFactory,
    UserFactory,
)
from tests.tfplatform.searches.conftest import trial_trains
from tfplatform.cluster.models import Allocation
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.execution import trial_fail_orphaned
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.searches.models import Search, SearchTrial
from tfplatform.searches.services import search_advance

pytestmark = pytest.mark.django_db

SPACE = {"learning_rate": {"low": 0.001, "high": 0.1, "log": True},
         "hidden_units": {"values": [16, 32, 64]}}


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def submit(client: APIClient, **fields: Any) -> Any:
    body = {"name": "lr sweep", "model": "mlp", "dataset": "digits", "searcher": "random",
            "space": SPACE, "max_trials": 5, "max_concurrent": 2, **fields}
    return client.post("/api/v1/searches/", body, format="json")


def members(search_id: int) -> list[SearchTrial]:
    return list(SearchTrial.objects.filter(search_id=search_id).select_related("experiment")
                .order_by("index"))


def test_a_search_submits_its_first_trials_as_experiments_of_its_owner() -> None:
    team = TeamFactory()
    owner = UserFactory(team=team)
    response = submit(api(owner), priority=0, hyperparameters={"batch_size": 16, "epochs": 4})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "running" and body["max_epochs"] == 4
    assert [t["index"] for t in body["trials"]] == [0, 1]
    for member in members(body["id"]):
        experiment = member.experiment
        assert experiment.state == "queued" and experiment.owner == owner
        assert experiment.team == team and experiment.target_metric == "val_accuracy"
        assert experiment.hyperparameters["batch_size"] == 16
        assert experiment.hyperparameters["epochs"] == 4
        assert experiment.hyperparameters["hidden_units"] == member.params["hidden_units"]
        assert 0.001 <= experiment.hyperparameters["learning_rate"] <= 0.1


@pytest.mark.parametrize(("fields", "message"), [
    ({"searcher": "bayes"}, "searcher"),
    ({"space": {"learning_rate": {"low": 0.1, "high": 50.0}}}, "space.learning_rate"),
    ({"space": {"optimizer": {"values": ["adam", "lbfgs"]}}}, "optimizer must be one of"),
    ({"searcher": "grid", "space": {"learning_rate": {"low": 0.001, "high": 0.1}}},
     "continuous range has no grid"),
    ({"searcher": "adaptive", "space": {"epochs": {"values": [1, 2]}}}, "take epochs out"),
    ({"searcher": "adaptive", "grace_period": 5, "max_epochs": 3}, "max_epochs"),
    ({"max_trials": 5000}, "max_trials"),
    ({"dataset": "no-such-dataset"}, "dataset"),
    ({"mode": "sideways"}, "mode"),
    ({"surprise": 1}, "surprise"),
])
def test_a_bad_search_is_refused_whole_with_the_reason(fields: dict[str, Any],
                                                      message: str) -> None:
    response = submit(api(UserFactory()), **fields)
    assert response.status_code == 400
    assert message in str(response.json())
    assert not Search.objects.exists() and not Experiment.objects.exists()


def test_grid_trains_every_point_once_then_ends_saying_so() -> None:
    client = api(UserFactory())
    space = {"hidden_units": {"values": [16, 32]}, "optimizer": {"values": ["adam", "sgd"]}}
    search_id = submit(client, searcher="grid", space=space, max_trials=None,
                       max_concurrent=3).json()["id"]
    assert Search.objects.get(pk=search_id).max_trials == 4
    for step in range(4):
        running = [m for m in members(search_id) if m.outcome == ""]
        trial_trains(running[0].experiment, values={1: 0.5 + step / 10, 2: 0.6 + step / 10})
        search_advance(search_id=search_id)
    done = members(search_id)
    assert {(m.params["hidden_units"], m.params["optimizer"]) for m in done} == {
        (16, "adam"), (16, "sgd"), (32, "adam"), (32, "sgd")}
    assert all(m.outcome == "finished" for m in done)
    search = Search.objects.get(pk=search_id)
    assert search.state == "completed"
    assert search.end_reason.startswith("Every point of its grid trained: 4 finished")
    detail = client.get(f"/api/v1/searches/{search_id}/").json()
    best = max(detail["trials"], key=lambda t: t["best_value"])
    assert detail["best_trial"] == best["index"] and best["best_epoch"] == 2
    csv = client.get(f"/api/v1/searches/{search_id}/trials.csv")
    assert csv.status_code == 200 and csv["Content-Type"].startswith("text/csv")
    lines = csv.content.decode().splitlines()
    assert lines[0].startswith("trial,experiment,hidden_units,optimizer,state,outcome")
    assert len(lines) == 5 and lines[1 + best["index"]].endswith(",True")


def test_adaptive_stops_the_weaker_and_continues_a_promoted_trial_from_its_epochs() -> None:
    client = api(UserFactory())
    search_id = submit(client, searcher="adaptive", max_trials=4, max_concurrent=1,
                       max_epochs=3, grace_period=1, reduction_factor=3).json()["id"]
    first = members(search_id)[0].experiment
    assert first.hyperparameters["epochs"] == 1
    trial_trains(first, values={1: 0.6})
    search_advance(search_id=search_id)
    first.refresh_from_db()
    # Alone at its rung, it is promoted: queued again for 3 epochs, resuming from epoch 1.
    assert first.state == "queued" and first.hyperparameters["epochs"] == 3
    assert "from its checkpoint at epoch 1" in first.pending_reason
    assert members(search_id)[0].rung == 1 and len(members(search_id)) == 1
    trial_trains(first, values={2: 0.7, 3: 0.8})
    search_advance(search_id=search_id)
    weak = members(search_id)[1].experiment
    trial_trains(weak, values={1: 0.3})
    search_advance(search_id=search_id)
    stopped = members(search_id)[1]
    assert stopped.outcome == "stopped" and stopped.experiment.state == "completed"
    assert stopped.rung_values == {"0": 0.3}
    while active := [m for m in members(search_id) if m.outcome == ""]:
        trial_trains(active[0].experiment, values={1: 0.1})
        search_advance(search_id=search_id)
    search = Search.objects.get(pk=search_id)
    assert search.state == "completed", search.end_reason
    assert "1 finished, 3 stopped at a rung" in search.end_reason
    top = members(search_id)[0]
    assert top.outcome == "finished" and top.best_value == 0.8 and top.best_epoch == 3
    assert top.experiment.trials.count() == 2


def test_a_failed_trial_counts_as_failed_and_the_search_goes_on() -> None:
    search_id = submit(api(UserFactory()), max_trials=3, max_concurrent=1).json()["id"]
    trial_trains(members(search_id)[0].experiment, values={1: 0.2}, state="failed",
                 error="ValueError: the user's own bug")
    search_advance(search_id=search_id)
    assert [m.outcome for m in members(search_id)] == ["failed", ""]
    trial_trains(members(search_id)[1].experiment, values={1: 0.9})
    search_advance(search_id=search_id)
    assert Search.objects.get(pk=search_id).state == "running"


def test_a_search_whose_first_trials_all_fail_ends_with_the_first_error() -> None:
    search_id = submit(api(UserFactory()), max_trials=8, max_concurrent=1).json()["id"]
    for _ in range(3):
        trial_trains(members(search_id)[-1].experiment, values={}, state="failed",
                     error="NameError: name 'tf' is not defined")
        search_advance(search_id=search_id)
    search = Search.objects.get(pk=search_id)
    assert search.state == "completed" and len(members(search_id)) == 3
    assert "first 3 trials all failed" in search.end_reason
    assert "NameError" in search.end_reason


def test_cancel_ends_the_search_and_cancels_its_queued_trials() -> None:
    client = api(UserFactory())
    search_id = submit(client).json()["id"]
    response = client.post(f"/api/v1/searches/{search_id}/cancel/")
    assert response.status_code == 202 and response.json()["state"] == "canceled"
    assert {m.experiment.state for m in members(search_id)} == {"canceled"}
    search_advance(search_id=search_id)
    assert {m.outcome for m in members(search_id)} == {"canceled"}
    assert len(members(search_id)) == 2  # nothing new starts after a cancel
    again = client.post(f"/api/v1/searches/{search_id}/cancel/")
    assert again.status_code == 409 and "already canceled" in again.json()["error"]


def test_deploy_best_needs_a_completed_trial() -> None:
    client = api(UserFactory())
    search_id = submit(client).json()["id"]
    response = client.post(f"/api/v1/searches/{search_id}/deploy-best/", {"model_name": "best"},
                           format="json")
    assert response.status_code == 409 and "No trial" in response.json()["error"]


def test_the_trials_csv_lets_no_value_run_as_a_formula() -> None:
    client = api(UserFactory())
    search_id = submit(client, max_trials=1, max_concurrent=1).json()["id"]
    # An uploaded model's text hyperparameter takes any value: as if one had been sampled.
    Search.objects.filter(pk=search_id).update(space={**SPACE, "activation": {"values": ["x"]}})
    SearchTrial.objects.filter(search_id=search_id).update(
        params={"activation": "\r=cmd|' /C calc'!A0", "hidden_units": 16, "learning_rate": -0.5})
    answer = client.get(f"/api/v1/searches/{search_id}/trials.csv")
    table = list(csv.reader(io.StringIO(answer.content.decode(), newline="")))
    assert table[0][2:5] == ["activation", "hidden_units", "learning_rate"]
    assert table[1][2:5] == ["'\r=cmd|' /C calc'!A0", "16", "-0.5"]


def test_another_user_sees_neither_the_search_nor_its_trials() -> None:
    team = TeamFactory()
    owner, teammate, stranger = UserFactory(team=team), UserFactory(team=team), UserFactory()
    search_id = submit(api(owner)).json()["id"]
    experiment_id = members(search_id)[0].experiment_id
    outsider = api(stranger)
    assert outsider.get("/api/v1/searches/").json()["results"] == []
    for path in ("", "trials.csv"):
        assert outsider.get(f"/api/v1/searches/{search_id}/{path}").status_code == 404
    assert outsider.post(f"/api/v1/searches/{search_id}/cancel/").status_code == 404
    assert outsider.post(f"/api/v1/searches/{search_id}/deploy-best/", {"model_name": "x"},
                         format="json").status_code == 404
    assert outsider.get(f"/api/v1/experiments/{experiment_id}/").status_code == 404
    assert Search.objects.get(pk=search_id).state == "running"
    assert api(teammate).get(f"/api/v1/searches/{search_id}/").status_code == 200
    assert api(UserFactory(is_staff=True)).get(f"/api/v1/searches/{search_id}/").status_code \
        == 200


def test_two_users_searches_share_gpus_by_quota_and_priority() -> None:
    gpu_environment = EnvironmentFactory(gpu_capable=True)
    node = NodeFactory()
    for index in range(4):
        DeviceFactory(node=node, kind="gpu", index=index)
    small_team = TeamFactory(gpu_quota=1, max_priority=10)
    first = api(UserFactory(team=small_team))
    second = api(UserFactory(team=TeamFactory(gpu_quota=4, max_priority=10)))
    gpus = {"resources": {"gpus_per_worker": 1}, "environment": gpu_environment.name}
    quota_bound = submit(first, **gpus, max_concurrent=3).json()["id"]
    urgent = submit(second, **gpus, max_concurrent=2, priority=5).json()["id"]
    scheduler_pass()
    states = {sid: [m.experiment.state for m in members(sid)] for sid in (quota_bound, urgent)}
    # The later search's higher priority goes first; the team with a 1-GPU quota gets one
    # of the two GPUs left, and the other stays free.
    assert states[urgent] == ["scheduled", "scheduled"]
    assert states[quota_bound].count("scheduled") == 1
    waiting = [m.experiment for m in members(quota_bound) if m.experiment.state == "queued"]
    assert waiting and all("Team quota of 1 GPUs" in e.pending_reason for e in waiting)


def test_a_node_failure_sends_the_trial_back_to_the_queue_not_out_of_the_search() -> None:
    node = NodeFactory()
    DeviceFactory(node=node, kind="cpu", index=0)
    search_id = submit(api(UserFactory()), max_concurrent=1).json()["id"]
    scheduler_pass()
    member = members(search_id)[0]
    trial = member.experiment.trials.get()
    trial_fail_orphaned(trial_id=trial.pk, reason="A node running this trial stopped sending "
                                                  "heartbeats (node lost).")
    search_advance(search_id=search_id)
    member.experiment.refresh_from_db()
    assert member.experiment.state == "queued"
    assert "Restarting after" in member.experiment.pending_reason
    assert [m.outcome for m in members(search_id)] == [""]
    assert not Allocation.objects.filter(released_at__isnull=True).exists()
