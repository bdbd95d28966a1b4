"""Where the other apps publish: an experiment's end, a search's end and a culled workspace
each record one event for their owner's subscribers (the model loader's: test_model_loader)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.factories import ExperimentFactory, UserFactory
from tfplatform.accounts.models import User
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.notifications.events import EventKind
from tfplatform.notifications.models import Delivery, Event
from tfplatform.notifications.services import SubscriptionRequest, subscription_create
from tfplatform.searches.services import SearchRequest, search_cancel, search_create
from tfplatform.workspaces.models import Workspace
from tfplatform.workspaces.services import workspaces_cull

pytestmark = pytest.mark.django_db


def _subscriber(*events: str) -> User:
    user = UserFactory(email="someone@example.com")
    subscription_create(owner=user, request=SubscriptionRequest(events=list(events), email=True))
    return user


def test_an_experiment_that_completes_or_fails_is_published() -> None:
    owner = _subscriber(EventKind.EXPERIMENT_COMPLETED, EventKind.EXPERIMENT_FAILED)
    completed = ExperimentFactory(owner=owner, name="mnist", state=Experiment.State.RUNNING)
    experiment_transition(experiment=completed, to=Experiment.State.COMPLETED,
                          results={"val_accuracy": 0.93})
    failed = ExperimentFactory(owner=owner, name="resnet", state=Experiment.State.RUNNING)
    experiment_transition(experiment=failed, to=Experiment.State.FAILED,
                          error="Traceback …\nResourceExhaustedError: OOM")
    canceled = ExperimentFactory(owner=owner, state=Experiment.State.QUEUED)
    experiment_transition(experiment=canceled, to=Experiment.State.CANCELED)
    session = ExperimentFactory(owner=owner, kind=Experiment.Kind.WORKSPACE,
                                state=Experiment.State.RUNNING)
    experiment_transition(experiment=session, to=Experiment.State.COMPLETED)

    events = list(Event.objects.order_by("pk"))
    assert [(e.kind, e.payload["id"]) for e in events] == [
        ("experiment.completed", completed.pk), ("experiment.failed", failed.pk)]
    assert events[0].payload["results"] == {"val_accuracy": 0.93}
    assert events[0].payload["name"] == "mnist" and events[0].owner == owner
    assert events[1].payload["error"].endswith("ResourceExhaustedError: OOM")
    assert Delivery.objects.count() == 2


def test_a_search_that_ends_is_published() -> None:
    owner = _subscriber(EventKind.SEARCH_ENDED)
    search = search_create(owner=owner, request=SearchRequest(
        name="lr sweep", searcher="random", model="mlp", dataset="digits",
        space={"learning_rate": {"low": 0.001, "high": 0.1}}, max_trials=2))
    assert not Event.objects.exists()  # its trials' experiments queued, nothing ended
    search_cancel(user=owner, search=search)

    [event] = Event.objects.all()
    assert (event.kind, event.owner) == ("search.ended", owner)
    assert event.payload == {"id": search.pk, "name": "lr sweep", "state": "canceled",
                             "reason": f"Canceled by {owner.username}."}


def test_a_culled_workspace_is_published() -> None:
    owner = _subscriber(EventKind.WORKSPACE_CULLED)
    session = ExperimentFactory(owner=owner, kind=Experiment.Kind.WORKSPACE, dataset="",
                                state=Experiment.State.RUNNING,
                                started_at=timezone.now() - timedelta(hours=1))
    workspace = Workspace.objects.create(
        owner=owner, name="notebook", experiment=session,
        last_activity_at=timezone.now() - timedelta(days=1))

    assert workspaces_cull() == [workspace.pk]
    [event] = Event.objects.all()
    assert (event.kind, event.payload) == (
        "workspace.culled", {"id": workspace.pk, "name": "notebook", "reason": "idle"})
