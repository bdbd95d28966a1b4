"""The experiment state machine: which moves it allows and what a move may record."""

import pytest

from tests.factories import ExperimentFactory
from tfplatform.core.errors import InvalidTransition
from tfplatform.experiments.services.transitions import experiment_continue, experiment_transition

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("start", "to"),
    [
        ("queued", "running"),
        ("queued", "completed"),
        ("completed", "running"),
        ("failed", "queued"),
        ("canceled", "scheduled"),
        ("scheduled", "completed"),
    ],
)
def test_illegal_transitions_are_refused(start: str, to: str) -> None:
    experiment = ExperimentFactory(state=start)
    with pytest.raises(InvalidTransition):
        experiment_transition(experiment=experiment, to=to)
    experiment.refresh_from_db()
    assert experiment.state == start


def test_legal_path_sets_timestamps() -> None:
    experiment = ExperimentFactory()
    for state in ("scheduled", "running", "completed"):
        experiment = experiment_transition(experiment=experiment, to=state)
    assert experiment.started_at is not None and experiment.finished_at is not None
    assert experiment.finished_at >= experiment.started_at


def test_a_transition_records_only_what_it_names_and_refuses_any_other_field() -> None:
    experiment = ExperimentFactory(strategy="default")
    experiment = experiment_transition(experiment=experiment, to="scheduled", pending_reason="")
    with pytest.raises(TypeError, match="stat"):
        experiment_transition(experiment=experiment, to="running", stat="completed")  # type: ignore[call-arg]
    experiment.refresh_from_db()
    assert experiment.state == "scheduled"  # the misspelt call changed nothing
    experiment = experiment_transition(experiment=experiment, to="running")
    experiment = experiment_transition(
        experiment=experiment, to="failed", error="boom", results={"exported": False}
    )
    assert (experiment.state, experiment.error, experiment.results) == (
        "failed", "boom", {"exported": False}
    )
    assert experiment.strategy == "default"  # not named: left as it was


@pytest.mark.parametrize(("start", "epochs", "message"), [
    ("failed", 5, "Only a completed experiment"),
    ("canceled", 5, "Only a completed experiment"),
    ("running", 5, "Only a completed experiment"),
    ("completed", 2, "already trained 2 epochs"),
])
def test_only_a_completed_experiment_trains_on_and_only_further(start: str, epochs: int,
                                                                message: str) -> None:
    experiment = ExperimentFactory(state=start)  # trained 2 epochs (the factory's)
    with pytest.raises(InvalidTransition, match=message):
        experiment_continue(experiment=experiment, epochs=epochs, reason="more")
    experiment.refresh_from_db()
    assert experiment.state == start and experiment.hyperparameters["epochs"] == 2


def test_a_continued_experiment_is_queued_again_for_more_epochs() -> None:
    experiment = ExperimentFactory(state="completed")
    experiment_continue(experiment=experiment, epochs=6, reason="Promoted to rung 1")
    assert experiment.state == "queued" and experiment.finished_at is None
    assert experiment.hyperparameters["epochs"] == 6
    assert experiment.hyperparameters["learning_rate"] == 0.01  # the rest as it was
    assert experiment.pending_reason == "Promoted to rung 1"
