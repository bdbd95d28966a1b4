"""Driving a search's trials through their lives with the platform's own services (no worker):
what a worker node records when a trial trains, minus the training."""

from typing import Any

from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.experiments.services.trials import metrics_record, trial_create, trial_finish


def trial_trains(experiment: Experiment, *, values: dict[int, float], state: str = "completed",
                 metric: str = "val_accuracy", error: str = "") -> None:
    """One attempt of the experiment: scheduled, running, its epochs' metric, then `state`."""
    experiment_transition(experiment=experiment, to="scheduled")
    trial = trial_create(experiment=experiment)
    experiment_transition(experiment=experiment, to="running")
    for epoch, value in values.items():
        metrics_record(trial=trial, values={metric: value}, step=epoch, epoch=epoch)
    trial_finish(trial=trial, state=state, exit_reason=error)
    extra: dict[str, Any] = {"error": error} if state == "failed" else {}
    experiment_transition(experiment=experiment, to=state, **extra)
