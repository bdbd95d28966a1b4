"""How a trial's outcome becomes the experiment's state, including outcomes racing a stop."""

import pytest

from tests.factories import DeviceFactory, ExperimentFactory, NodeFactory
from tfplatform.cluster.models import Allocation
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.services.execution import trial_outcome_record, trial_spec_build
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.experiments.services.submission import experiment_cancel
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.experiments.services.trials import trial_request_stop, trial_start
from training.spec import TrialOutcome

pytestmark = pytest.mark.django_db

# What the chief of a two-node gang reports when the other node's task stopped first.
PEER_GONE = TrialOutcome(
    status="failed",
    retryable=True,
    exit_reason="worker-0 crashed (exit code 1): collective failed, peer unreachable",
    exit_codes={"worker-0": 1},
)


def running_trial(*, max_restarts: int = 3) -> Trial:
    DeviceFactory(node=NodeFactory(), kind="cpu", index=0)
    experiment = ExperimentFactory(max_restarts=max_restarts)
    assert scheduler_pass() == 1
    trial = experiment.trials.get()
    trial_start(trial_id=trial.pk)
    experiment_transition(experiment=experiment, to=Experiment.State.RUNNING)
    return trial


def test_a_failure_while_canceling_cancels_instead_of_restarting() -> None:
    trial = running_trial()
    experiment_cancel(experiment=trial.experiment)

    trial_outcome_record(trial=trial, outcome=PEER_GONE)

    experiment = Experiment.objects.get(pk=trial.experiment_id)
    assert experiment.state == "canceled"
    assert experiment.trials.count() == 1  # no restart was queued
    trial.refresh_from_db()
    assert trial.state == "canceled"
    assert "a task ended while stopping" in trial.exit_reason
    assert not Allocation.objects.filter(released_at__isnull=True).exists()


def test_a_failure_while_preempted_requeues_without_spending_a_restart() -> None:
    trial = running_trial(max_restarts=0)
    trial_request_stop(trial=trial, reason="preempted")

    trial_outcome_record(trial=trial, outcome=PEER_GONE)

    experiment = Experiment.objects.get(pk=trial.experiment_id)
    assert experiment.state == "queued"
    assert experiment.pending_reason == "Preempted; resumes from its last checkpoint."
    assert not experiment.trials.filter(state="failed").exists()


def test_a_failure_without_a_stop_restarts() -> None:
    trial = running_trial()

    trial_outcome_record(trial=trial, outcome=PEER_GONE)

    experiment = Experiment.objects.get(pk=trial.experiment_id)
    assert experiment.state == "queued"
    assert experiment.pending_reason.startswith("Restarting after: worker-0 crashed")


def test_a_failure_of_an_orphaned_gang_stays_a_failure() -> None:
    trial = running_trial(max_restarts=0)
    trial_request_stop(trial=trial, reason="orphaned")

    trial_outcome_record(trial=trial, outcome=PEER_GONE)

    assert Experiment.objects.get(pk=trial.experiment_id).state == "failed"


def test_a_completed_experiment_shows_facts_but_no_paths_of_the_node() -> None:
    trial = running_trial()
    outcome = TrialOutcome(
        status="completed", retryable=False, exit_reason="", exit_codes={"worker-0": 0},
        final_metrics={"accuracy": 0.9}, export_path="/srv/work/experiment-7/export",
        best_checkpoint_path="/srv/work/experiment-7/best/epoch-2",
        attempt_dir="/srv/runs/experiment-7/attempts/001", epochs_completed=2,
    )
    trial_outcome_record(trial=trial, outcome=outcome)

    results = Experiment.objects.get(pk=trial.experiment_id).results
    assert results["exported"] is True and results["epochs_completed"] == 2
    assert results["final_metrics"] == {"accuracy": 0.9}
    assert "/srv/" not in str(results)


@pytest.mark.parametrize("emulated", [False, True])
def test_a_trial_s_spec_says_whether_its_gpus_are_real(emulated: bool) -> None:
    """Real ones (NVML found them) its TensorFlow must see; emulated ones it may stand in for."""
    node = NodeFactory()
    DeviceFactory(node=node, index=0, emulated=emulated, name="NVIDIA H100 80GB HBM3")
    DeviceFactory(node=node, index=1, emulated=emulated, name="NVIDIA H100 80GB HBM3")
    experiment = ExperimentFactory(gpus_per_worker=2)
    assert scheduler_pass() == 1
    resources = trial_spec_build(trial=experiment.trials.get()).resources
    assert resources.gpu_ids == (0, 1) and resources.gpus_physical is not emulated
