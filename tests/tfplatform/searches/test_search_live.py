"""A real adaptive search: the zoo's mlp on digits, trials trained by a live worker node with
two slots, the best one deployed to the embedded model server and asked for predictions."""

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests import live
from tests.factories import UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tests.tfplatform.modelregistry.conftest import version_loaded
from tfplatform.cluster.models import Allocation, Node
from tfplatform.experiments.models import Metric
from tfplatform.searches.models import Search, SearchTrial

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def two_slot_node(tmp_path: Path, settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> Iterator[Path]:
    name = f"search-{tmp_path.name[-12:]}"
    log = tmp_path / "worker.log"
    work = tmp_path / "work"
    platform_settings_override(work_dir=work)
    process = live.worker_start(node=name, log=log, cpu_slots=2, PLATFORM_WORK_DIR=str(work))
    live.wait_for(lambda: Node.objects.filter(hostname=name).exists(), timeout=60,
                  what="node registration", log=log)
    yield log
    live.stop(process)


def test_adaptive_search_stops_the_weak_promotes_without_repeating_and_deploys_the_best(
    two_slot_node: Path, model_server: dict[str, Any]
) -> None:
    log = two_slot_node
    client = APIClient()
    client.force_authenticate(UserFactory())
    created = client.post("/api/v1/searches/", {
        "name": "digits mlp", "model": "mlp", "dataset": "digits", "searcher": "adaptive",
        # From hopeless (1e-5 barely moves in an epoch) to good: the rung has losers to stop.
        "space": {"learning_rate": {"low": 1e-5, "high": 0.05, "log": True},
                  "hidden_units": {"values": [8, 32, 64]}},
        "max_trials": 9, "max_concurrent": 2, "max_epochs": 3, "grace_period": 1,
        "reduction_factor": 3, "seed": 11, "hyperparameters": {"batch_size": 64},
    }, format="json")
    assert created.status_code == 201, created.content
    search_id = created.json()["id"]
    live.wait_for(lambda: Search.objects.get(pk=search_id).state != "running", timeout=900,
                  what="the search to end", log=log)
    search = Search.objects.get(pk=search_id)
    detail = client.get(f"/api/v1/searches/{search_id}/").json()
    trials = detail["trials"]
    assert search.state == "completed", (search.end_reason, trials)
    assert len(trials) == 9 and "Its budget of 9 trials is spent" in search.end_reason
    assert all(t["outcome"] in ("stopped", "finished") for t in trials), trials

    stopped = [t for t in trials if t["outcome"] == "stopped"]
    promoted = [t for t in trials if t["rung"] >= 1]
    assert stopped and promoted
    for trial in stopped:
        # Stopped at the first rung: one epoch, and its device back as its trial ended.
        assert trial["rung"] == 0 and trial["epochs"] == 1
    assert not Allocation.objects.filter(
        trial__experiment__search_trial__search_id=search_id, released_at__isnull=True).exists()
    for trial in promoted:
        member = SearchTrial.objects.get(search_id=search_id, index=trial["index"])
        attempts = list(member.experiment.trials.order_by("restart_count"))
        assert len(attempts) == 1 + trial["rung"]
        epochs = Counter(Metric.objects.filter(trial__experiment=member.experiment,
                                               name="val_accuracy")
                         .values_list("epoch", flat=True))
        # Every epoch trained once: the promoted attempt resumed after the rung's last one.
        assert sorted(epochs) == list(range(1, trial["epochs"] + 1))
        assert set(epochs.values()) == {1}
        second = attempts[1]
        assert set(second.metrics.filter(name="val_accuracy").values_list("epoch", flat=True)) \
            == set(range(2, trial["epochs"] + 1))
        results = member.experiment.results
        assert results["resumed_from_epoch"] == 1 and results["epochs_completed"] == 3

    best = max(trials, key=lambda t: t["best_value"])
    assert detail["best_trial"] == best["index"]
    assert best["best_value"] == max(t["best_value"] for t in trials)
    assert best["best_value"] >= 0.8, trials

    stranger = APIClient()
    stranger.force_authenticate(UserFactory())
    assert stranger.post(f"/api/v1/searches/{search_id}/deploy-best/",
                         {"model_name": "digits-best"}, format="json").status_code == 404
    deployed = client.post(f"/api/v1/searches/{search_id}/deploy-best/",
                           {"model_name": "digits-best"}, format="json")
    assert deployed.status_code == 202, deployed.content
    assert version_loaded(client, "digits-best", 1)["state"] == "available"
    from sklearn.datasets import load_digits

    digits = load_digits()
    answer = client.post("/api/v1/models/digits-best:predict",
                         data=json.dumps({"instances": digits.data[:50].tolist()}),
                         content_type="application/json")
    assert answer.status_code == 200, answer.content
    predicted = [row["class_id"] for row in answer.json()["predictions"]]
    assert sum(int(p == y) for p, y in zip(predicted, digits.target[:50], strict=True)) >= 35
