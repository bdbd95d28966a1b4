"""Launches a search and plays its trials' training through the platform's own services (the
scheduler's and the worker's writes), so pages show real trials without training a model."""

from typing import Any

from tfplatform.accounts.models import User
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services import trials
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.searches import services
from tfplatform.searches.models import Search, SearchTrial

SPACE = {
    "learning_rate": {"low": 0.001, "high": 0.1, "log": True},
    "optimizer": {"values": ["adam", "sgd"]},
}


def search_launch(*, owner: User, **overrides: Any) -> Search:
    request: dict[str, Any] = {
        "name": "lr sweep", "searcher": "random", "space": SPACE, "model": "mlp",
        "dataset": "digits", "max_trials": 3, "max_concurrent": 2, "max_epochs": 2,
        **overrides,
    }
    return services.search_create(owner=owner, request=services.SearchRequest(**request))


def trial_train(*, member: SearchTrial, values: list[float], metric: str = "val_accuracy",
                state: str = Experiment.State.COMPLETED) -> None:
    """Its experiment scheduled, running, reporting `values` for epochs 1.., then ended; then
    the search's step, as the receiver's task would take it."""
    experiment = member.experiment
    experiment_transition(experiment=experiment, to=Experiment.State.SCHEDULED)
    experiment_transition(experiment=experiment, to=Experiment.State.RUNNING)
    trial = trials.trial_create(experiment=experiment)
    for epoch, value in enumerate(values, start=1):
        trials.metrics_record(trial=trial, values={metric: value}, epoch=epoch, step=epoch)
    experiment_transition(experiment=experiment, to=state)
    services.search_advance(search_id=member.search_id)
