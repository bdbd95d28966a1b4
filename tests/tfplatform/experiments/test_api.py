import pytest
from rest_framework.test import APIClient

from tests.factories import DeviceFactory, ExperimentFactory, NodeFactory, TeamFactory, UserFactory
from tfplatform.cluster.services import allocations_release
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.experiments.services.transitions import experiment_start, experiment_transition

pytestmark = pytest.mark.django_db

VALID = {
    "name": "digits-mlp",
    "model": "mlp",
    "dataset": "digits",
    "hyperparameters": {"epochs": 3, "batch_size": 64, "learning_rate": 0.01},
    "resources": {"workers": 1, "gpus_per_worker": 0, "parameter_servers": 0},
    "target_accuracy": 0.9,
    "max_restarts": 2,
    "priority": 5,
}


def client_for(user: object) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    return client


def test_create_stores_experiment_for_owner_in_queued_state() -> None:
    owner = UserFactory()
    response = client_for(owner).post("/api/v1/experiments/", VALID, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    experiment = Experiment.objects.get(pk=body["id"])
    assert experiment.owner == owner
    assert experiment.state == "queued"
    assert experiment.hyperparameters["batch_size"] == 64
    assert (
        experiment.environment is not None and experiment.environment.name == "tensorflow-2.21-cpu"
    )
    assert body["resources"] == {"workers": 1, "gpus_per_worker": 0, "parameter_servers": 0,
                                 "min_workers": None, "min_gpus_per_worker": None,
                                 "gpu_fraction": None, "gpu_memory_mb": 0, "pool": "",
                                 "gpu_type": ""}


@pytest.mark.parametrize(("team_max", "staff", "priority", "status"), [
    (None, False, 10, 201),  # the default band for users without a team
    (None, False, 11, 400),
    (20, False, 20, 201),  # a team granted more
    (20, False, 21, 400),
    (None, True, 100, 201),  # staff set any
])
def test_priorities_above_the_band_are_granted_not_taken(
    team_max: int | None, staff: bool, priority: int, status: int
) -> None:
    team = TeamFactory(max_priority=team_max) if team_max is not None else None
    user = UserFactory(team=team, is_staff=staff)
    response = client_for(user).post("/api/v1/experiments/", {**VALID, "priority": priority},
                                     format="json")
    assert response.status_code == status, response.json()
    if status == 400:
        assert "priority" in str(response.json())
        assert not Experiment.objects.filter(owner=user).exists()


def test_gpu_request_gets_gpu_environment() -> None:
    body = {**VALID, "resources": {"workers": 2, "gpus_per_worker": 2, "parameter_servers": 0}}
    response = client_for(UserFactory()).post("/api/v1/experiments/", body, format="json")
    assert response.status_code == 201
    assert response.json()["environment"] == "tensorflow-2.21-gpu"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model": "no-such-model"}, "model"),
        ({"dataset": "imagenet-from-the-internet"}, "dataset"),
        ({"resources": {"workers": -1}}, "workers"),
        ({"resources": {"workers": 1, "gpus_per_worker": 1000}}, "resources"),
        ({"resources": {"workers": 100000}}, "resources"),
        ({"resources": {"parameter_servers": 99}}, "resources"),
        ({"resources": {"workers": 1, "cores": 4}}, "cores"),
        ({"hyperparameters": {"epochs": "many"}}, "hyperparameters"),
        ({"hyperparameters": {"learning_rate": -1}}, "hyperparameters"),
        ({"hyperparameters": ["not", "an", "object"]}, "hyperparameters"),
        ({"hyperparameters": {"mixed_precision": "float8"}}, "hyperparameters"),
        ({"hyperparameters": {"mixed_precision": "mixed_float16"}}, "hyperparameters"),
        ({"hyperparameters": {"jit_compile": True},
          "resources": {"workers": 2, "parameter_servers": 1}}, "hyperparameters"),
        ({"target_accuracy": 1.5}, "target_accuracy"),
        ({"target": {"metric": "val_mae", "mode": "lowest"}}, "mode"),
        ({"target": {"metric": "val mae; drop"}}, "target"),
        ({"target": {"metric": "val_accuracy", "value": 3}}, "target"),
        ({"target": {"metric": "val_mae", "value": "NaN"}}, "target"),
        ({"target": {"metric": "val_mae", "colour": 1}}, "colour"),
        ({"target": "val_mae"}, "target"),
        ({"environment": "no-such-env"}, "environment"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_input_is_400_with_field_error(change: dict[str, object], field: str) -> None:
    response = client_for(UserFactory()).post(
        "/api/v1/experiments/", {**VALID, **change}, format="json"
    )
    assert response.status_code == 400
    body = response.json()
    assert "error" in body
    assert field in str(body), body
    assert Experiment.objects.count() == 0


def test_target_names_any_metric_and_its_mode() -> None:
    body = {key: value for key, value in VALID.items() if key != "target_accuracy"}
    client = client_for(UserFactory())
    response = client.post("/api/v1/experiments/", {
        **body, "target": {"metric": "val_mae", "value": 0.5}}, format="json")
    assert response.status_code == 201, response.json()
    # The mode of an error metric is min unless given.
    assert response.json()["target"] == {"metric": "val_mae", "mode": "min", "value": 0.5}
    assert response.json()["target_accuracy"] is None
    response = client.post("/api/v1/experiments/", VALID, format="json")
    assert response.json()["target"] == {"metric": "val_accuracy", "mode": "max", "value": 0.9}
    assert response.json()["target_accuracy"] == 0.9
    response = client.post("/api/v1/experiments/", {
        **VALID, "target": {"metric": "val_loss"}}, format="json")
    assert response.status_code == 400 and "not both" in str(response.json())


@pytest.mark.parametrize("field", ["owner", "state", "id", "team", "strategy"])
def test_mass_assignment_is_refused(field: str) -> None:
    victim = UserFactory()
    response = client_for(UserFactory()).post(
        "/api/v1/experiments/",
        {**VALID, field: victim.pk if field == "owner" else "completed"},
        format="json",
    )
    assert response.status_code == 400
    assert field in response.json()
    assert Experiment.objects.count() == 0


def test_malformed_json_is_400() -> None:
    response = client_for(UserFactory()).post(
        "/api/v1/experiments/", data=b"{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert "error" in response.json()


def test_anonymous_is_401() -> None:
    assert APIClient().get("/api/v1/experiments/").status_code == 401


def test_user_b_cannot_read_or_change_user_a_experiment() -> None:
    alice, bob = UserFactory(), UserFactory()
    experiment = ExperimentFactory(owner=alice)
    bob_client = client_for(bob)
    for url in (
        f"/api/v1/experiments/{experiment.pk}/",
        f"/api/v1/experiments/{experiment.pk}/metrics/",
        f"/api/v1/experiments/{experiment.pk}/logs/",
    ):
        response = bob_client.get(url)
        assert response.status_code == 404, url
        assert response.json() == {"error": "Experiment not found.", "code": "not_found"}
    assert bob_client.post(f"/api/v1/experiments/{experiment.pk}/cancel/").status_code == 404
    assert bob_client.get("/api/v1/experiments/").json()["results"] == []
    experiment.refresh_from_db()
    assert experiment.state == "queued"


def test_team_and_staff_see_experiment_others_do_not() -> None:
    team = TeamFactory()
    alice, teammate, stranger = UserFactory(team=team), UserFactory(team=team), UserFactory()
    staff = UserFactory(is_staff=True)
    experiment = ExperimentFactory(owner=alice)
    url = f"/api/v1/experiments/{experiment.pk}/"
    assert client_for(teammate).get(url).status_code == 200
    assert client_for(staff).get(url).status_code == 200
    assert client_for(stranger).get(url).status_code == 404


def ran_on(*, unisolated: bool) -> Experiment:
    """Placed by the real scheduler on a node's CPU slot, run, finished and let go of."""
    node = NodeFactory(hostname="box", unisolated=unisolated)
    DeviceFactory(node=node, kind="cpu", index=0, name="cpu slot")
    experiment = ExperimentFactory()
    assert scheduler_pass() == 1
    experiment_start(experiment=experiment)
    experiment = experiment_transition(experiment=experiment, to="completed")
    allocations_release(trial_id=experiment.trials.get().pk)
    return experiment


@pytest.mark.parametrize("unisolated", [True, False])
def test_detail_says_whether_its_trials_ran_isolated(unisolated: bool) -> None:
    experiment = ran_on(unisolated=unisolated)
    client = client_for(experiment.owner)
    assert client.get(f"/api/v1/experiments/{experiment.pk}/").json()["isolated"] is not unisolated


def test_an_experiment_never_placed_counts_as_isolated() -> None:
    NodeFactory(unisolated=True)  # no slot: nothing is placed there
    experiment = ExperimentFactory()
    assert scheduler_pass() == 0
    response = client_for(experiment.owner).get(f"/api/v1/experiments/{experiment.pk}/")
    assert response.json()["isolated"] is True


def test_list_filters_by_state_and_owner() -> None:
    staff = UserFactory(is_staff=True)
    alice = UserFactory(username="alice")
    ExperimentFactory(owner=alice, state="completed")
    ExperimentFactory(owner=alice)
    ExperimentFactory()
    client = client_for(staff)
    assert client.get("/api/v1/experiments/?state=completed").json()["count"] == 1
    assert client.get("/api/v1/experiments/?owner=alice").json()["count"] == 2
    assert client.get("/api/v1/experiments/?state=bogus").status_code == 400


def test_cancel_queued_experiment() -> None:
    experiment = ExperimentFactory()
    client = client_for(experiment.owner)
    response = client.post(f"/api/v1/experiments/{experiment.pk}/cancel/")
    assert response.status_code == 202
    assert response.json()["state"] == "canceled"
    again = client.post(f"/api/v1/experiments/{experiment.pk}/cancel/")
    assert again.status_code == 409
    assert "already canceled" in again.json()["error"]


def test_upload_model_requires_file() -> None:
    response = client_for(UserFactory()).post(
        "/api/v1/experiments/", {**VALID, "model": "upload"}, format="json"
    )
    assert response.status_code == 400
    assert "model_file" in response.json()


def test_environments_list() -> None:
    names = [
        e["name"] for e in client_for(UserFactory()).get("/api/v1/environments/").json()["results"]
    ]
    assert names == ["tensorflow-2.21-cpu", "tensorflow-2.21-gpu"]


def test_mixed_precision_and_xla_are_kept_with_the_experiment_where_they_can_run() -> None:
    response = client_for(UserFactory()).post("/api/v1/experiments/", {
        **VALID, "hyperparameters": {"mixed_precision": "mixed_bfloat16", "jit_compile": True},
    }, format="json")
    assert response.status_code == 201, response.json()
    stored = Experiment.objects.get().hyperparameters
    assert (stored["mixed_precision"], stored["jit_compile"]) == ("mixed_bfloat16", True)
