"""Experiment list and detail pages: live status fragment, chart JSON, timers, progress."""

import pytest
from django.test import Client

from tests.factories import (
    DeviceFactory,
    EnvironmentFactory,
    ExperimentFactory,
    NodeFactory,
    UserFactory,
    node_with_gpus,
)
from tests.tfplatform.web.training_events import epochs_report, strategy_report
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.experiments.services.transitions import (
    experiment_set_pending_reason,
    experiment_start,
    experiment_transition,
)

pytestmark = pytest.mark.django_db


def logged_in(user: object) -> Client:
    client = Client()
    client.force_login(user)
    return client


def running_experiment(**fields: object) -> Experiment:
    """Placed by the real scheduler on a node's CPU slot, and started."""
    DeviceFactory(node=NodeFactory(hostname="box-1"), kind="cpu", index=0, name="cpu slot")
    hyperparameters = {"epochs": 4, "batch_size": 8, "learning_rate": 0.01}
    experiment = ExperimentFactory(name="live one", hyperparameters=hyperparameters, **fields)
    assert scheduler_pass() == 1
    experiment_start(experiment=experiment)
    experiment.refresh_from_db()
    return experiment


def finished(experiment: Experiment, state: str = "completed", **changes: object) -> Experiment:
    for step in ("scheduled", "running"):
        experiment = experiment_transition(experiment=experiment, to=step)
    return experiment_transition(experiment=experiment, to=state, **changes)


def test_queued_detail_shows_queue_position_reason_and_polls() -> None:
    first = ExperimentFactory(name="first in line")
    second = ExperimentFactory(name="second in line")
    assert scheduler_pass() == 0  # no node: both wait, with a reason
    client = logged_in(second.owner)
    html = client.get(f"/experiments/{second.pk}/").content.decode()
    assert 'id="queue-position">2<' in html
    assert "No worker node is online" in html
    assert 'hx-trigger="every 2s"' in html and 'id="cancel"' in html
    assert "data-since=" in html  # the queued timer ticks in the browser
    assert 'id="restart"' not in html and 'id="deploy"' not in html
    assert (
        'id="queue-position">1<'
        in logged_in(first.owner).get(f"/experiments/{first.pk}/live/").content.decode()
    )


def test_running_detail_shows_devices_strategy_progress_and_log() -> None:
    experiment = running_experiment()
    trial = experiment.trials.get()
    strategy_report(trial=trial, strategy="default", reason="no GPU on 1 worker")
    epochs_report(trial=trial, epochs=range(1, 3))
    client = logged_in(experiment.owner)
    for url in (f"/experiments/{experiment.pk}/", f"/experiments/{experiment.pk}/live/"):
        html = client.get(url).content.decode()
        assert "box-1" in html and "CPU 0" in html and "worker:0" in html
        assert 'id="strategy">default<' in html and "no GPU on 1 worker" in html
        assert "epoch 2 / 4" in html and 'aria-valuenow="2"' in html
        assert "phase=strategy" in html  # the log tail
        assert 'id="queue"' not in html
    fragment = client.get(f"/experiments/{experiment.pk}/live/").content.decode()
    # The fragment refreshes the trials and the log beside the status, out of band.
    assert fragment.count('hx-swap-oob="true"') == 2
    assert "<html" not in fragment


def test_finished_detail_offers_restart_and_deploy_and_stops_polling() -> None:
    experiment = finished(
        ExperimentFactory(name="done", target_value=0.9),
        results={
            "exported": True,
            "final_metrics": {"accuracy": 0.93, "val_accuracy": 0.91, "loss": 0.2},
            "time_to_target_seconds": 75.0,
        },
    )
    html = logged_in(experiment.owner).get(f"/experiments/{experiment.pk}/").content.decode()
    assert 'id="restart"' in html and 'id="deploy"' in html and 'id="cancel"' not in html
    assert "hx-trigger" not in html.split('id="live"', 1)[1].split(">", 1)[0]
    assert 'id="final-val-accuracy">0.9100<' in html
    assert "1m 15s of training" in html
    assert "took" in html


def test_detail_warns_when_a_trial_ran_on_a_node_without_isolation() -> None:
    DeviceFactory(node=NodeFactory(hostname="dev-box", unisolated=True), kind="cpu", index=0)
    experiment = ExperimentFactory(name="unsandboxed")
    assert scheduler_pass() == 1
    experiment_start(experiment=experiment)
    experiment = experiment_transition(experiment=experiment, to="completed")
    client = logged_in(experiment.owner)
    for url in (f"/experiments/{experiment.pk}/", f"/experiments/{experiment.pk}/live/"):
        html = client.get(url).content.decode()
        assert 'id="not-isolated"' in html
        assert "Trials of this experiment ran without isolation" in html
        assert "(process runtime on node dev-box)" in html


def test_detail_of_a_sandboxed_run_has_no_isolation_warning() -> None:
    experiment = running_experiment()  # on box-1, a sandbox node
    html = logged_in(experiment.owner).get(f"/experiments/{experiment.pk}/").content.decode()
    assert "box-1" in html
    assert 'id="not-isolated"' not in html and "without isolation" not in html


def test_chart_json_returns_points_after_the_cursor() -> None:
    experiment = running_experiment()
    trial = experiment.trials.get()
    epochs_report(trial=trial, epochs=range(1, 2))
    client = logged_in(experiment.owner)
    url = f"/experiments/{experiment.pk}/charts.json"
    first = client.get(url).json()
    assert first["state"] == "running" and first["finished"] is False and first["more"] is False
    assert first["epochs"] == {
        "loss": [[1, 1.0]],
        "accuracy": [[1, 0.6]],
        "val_loss": [[1, 1.2]],
        "val_accuracy": [[1, 0.55]],
    }
    # The epoch's own images/sec and the sampler's reading are told apart.
    assert [value for _, value in first["images_per_sec_epoch"]] == [401.0]
    assert [value for _, value in first["images_per_sec"]] == [350.0]

    epochs_report(trial=trial, epochs=range(2, 3))
    second = client.get(url, {"after": first["cursor"]}).json()
    assert second["cursor"] > first["cursor"]
    assert second["epochs"]["val_accuracy"] == [[2, 0.65]]
    assert [value for _, value in second["images_per_sec_epoch"]] == [402.0]
    nothing = client.get(url, {"after": second["cursor"]}).json()
    assert nothing["epochs"] == {} and nothing["cursor"] == second["cursor"]


@pytest.mark.parametrize("after", ["-1", "abc", "1.5", "²", "9" * 40])
def test_chart_json_refuses_a_bad_cursor(after: str) -> None:
    experiment = ExperimentFactory()
    response = logged_in(experiment.owner).get(
        f"/experiments/{experiment.pk}/charts.json", {"after": after}
    )
    assert response.status_code == 400
    assert "error" in response.json()


def test_other_users_get_404_from_every_live_endpoint() -> None:
    experiment = running_experiment()
    epochs_report(trial=experiment.trials.get(), epochs=range(1, 3))
    stranger = logged_in(UserFactory())
    for suffix in ("", "live/", "charts.json"):
        assert stranger.get(f"/experiments/{experiment.pk}/{suffix}").status_code == 404
    assert stranger.post(f"/experiments/{experiment.pk}/restart/").status_code == 404
    anonymous = Client().get(f"/experiments/{experiment.pk}/charts.json")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")


def test_list_shows_timers_progress_and_compare_checkboxes() -> None:
    experiment = running_experiment()
    epochs_report(trial=experiment.trials.get(), epochs=range(1, 3))
    done = finished(ExperimentFactory(owner=experiment.owner, name="old one"))
    client = logged_in(experiment.owner)
    html = client.get("/experiments/").content.decode()
    assert f'id="pick-{experiment.pk}"' in html and f'id="pick-{done.pk}"' in html
    assert "epoch 2 / 4" in html
    assert 'running</span> <span class="timer" data-since=' in html.replace(
        '<span class="timer-label">', ""
    )
    assert "took" in html
    assert 'hx-trigger="every 5s"' in html  # something is running: the rows refresh
    rows = client.get("/experiments/", HTTP_HX_REQUEST="true").content.decode()
    assert rows.lstrip().startswith("<tbody") and "<html" not in rows
    only_done = client.get("/experiments/?state=completed").content.decode()
    assert "old one" in only_done and "live one" not in only_done
    assert 'hx-trigger="every 5s"' not in only_done


def test_restart_from_the_page_runs_it_again_as_a_new_experiment() -> None:
    experiment = finished(ExperimentFactory(name="again", priority=3), state="failed")
    client = logged_in(experiment.owner)
    response = client.post(f"/experiments/{experiment.pk}/restart/")
    rerun = Experiment.objects.exclude(pk=experiment.pk).get()
    assert response.status_code == 302
    assert response["Location"] == f"/experiments/{rerun.pk}/"
    assert (rerun.name, rerun.priority, rerun.state) == ("again", 3, "queued")
    active = ExperimentFactory(owner=experiment.owner)
    refused = client.post(f"/experiments/{active.pk}/restart/", follow=True)
    assert "Only a finished experiment can be restarted" in refused.content.decode()
    assert Experiment.objects.count() == 3


def test_new_form_proposes_the_catalogs_defaults_per_model() -> None:
    html = logged_in(UserFactory()).get("/experiments/new/").content.decode()
    assert 'name="epochs" value="20"' in html  # mlp's known-good settings
    assert 'name="batch_size" value="32"' in html
    assert '<option value="adam" selected>' in html
    defaults = html.split('id="hyperparameter-defaults" type="application/json">', 1)[1]
    assert (
        '"resnet20": {"epochs": 60, "batch_size": 128, "learning_rate": 0.1, "optimizer": "sgd"}'
        in defaults
    )
    assert 'id="resources-outlook"' in html and "Free right now" in html


def test_the_form_runs_it_in_the_chosen_environment_and_checks_it_fits() -> None:
    EnvironmentFactory(name="jokes", extra_packages=["pyjokes==0.8.3"])
    client = logged_in(UserFactory())
    page = client.get("/experiments/new/").content.decode()
    assert '<option value="jokes">jokes</option>' in page
    form = {
        "name": "in jokes", "model": "mlp", "dataset": "digits", "environment": "jokes",
        "epochs": 2, "batch_size": 32, "learning_rate": 0.01, "optimizer": "adam",
        "workers": 1, "gpus_per_worker": 0, "parameter_servers": 0, "priority": 0,
        "max_restarts": 1,
    }
    assert client.post("/experiments/new/", form).status_code == 302
    environment = Experiment.objects.get(name="in jokes").environment
    assert environment is not None and environment.name == "jokes"

    refused = client.post("/experiments/new/", {**form, "gpus_per_worker": 1}).content.decode()
    field = refused[refused.index('id="field-environment"'):]
    assert "has no GPU support" in field[: field.index("</div>")]


def test_a_scheduled_experiment_says_its_node_is_building_its_environment() -> None:
    experiment = experiment_transition(experiment=ExperimentFactory(), to="scheduled")
    reason = "Building environment 'jokes' on box-1."
    experiment_set_pending_reason(experiment=experiment, reason=reason)
    client = logged_in(experiment.owner)
    html = client.get(f"/experiments/{experiment.pk}/live/").content.decode()
    assert 'id="starting"' in html
    assert 'id="pending-reason">Building environment &#x27;jokes&#x27; on box-1.<' in html
    assert client.get(f"/api/v1/experiments/{experiment.pk}/").json()["pending_reason"] == reason

    # Cleared only while it is still that reason; a queued experiment's is the scheduler's.
    experiment_set_pending_reason(experiment=experiment, reason="", replacing="another")
    experiment.refresh_from_db()
    assert experiment.pending_reason == reason
    experiment_set_pending_reason(experiment=experiment, reason="", replacing=reason)
    experiment.refresh_from_db()
    assert experiment.pending_reason == ""
    queued = ExperimentFactory(pending_reason="Waiting for the scheduler.")
    experiment_set_pending_reason(experiment=queued, reason=reason)
    queued.refresh_from_db()
    assert queued.pending_reason == "Waiting for the scheduler."


def test_the_form_submits_an_elastic_range_and_the_trials_table_shows_each_size() -> None:
    node_with_gpus(gpus=4)
    client = logged_in(UserFactory())
    form = {
        "name": "elastic", "model": "mlp", "dataset": "digits", "epochs": 2, "batch_size": 32,
        "learning_rate": 0.01, "optimizer": "adam", "workers": 1, "gpus_per_worker": 4,
        "min_gpus_per_worker": 1, "parameter_servers": 0, "priority": 0, "max_restarts": 1,
    }
    refused = client.post("/experiments/new/", {**form, "min_gpus_per_worker": 3})
    assert "No size from 3 to 3 divides 4" in refused.content.decode()
    assert client.post("/experiments/new/", form).status_code == 302
    experiment = Experiment.objects.get(name="elastic")
    assert (experiment.gpus_per_worker, experiment.gpus_per_worker_min) == (4, 1)
    scheduler_pass()
    html = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert '<td class="trial-size">1 × 4 GPU</td>' in html
