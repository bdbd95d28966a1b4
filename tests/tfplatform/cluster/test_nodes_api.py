import pytest
from rest_framework.test import APIClient

from tests.factories import DeviceFactory, ExperimentFactory, NodeFactory, UserFactory
from tfplatform.cluster.scheduler import scheduler_pass

pytestmark = pytest.mark.django_db


def test_nodes_list_shows_devices_and_holders_only_to_those_who_may_see() -> None:
    node = NodeFactory(hostname="gpu-box")
    DeviceFactory(node=node, kind="gpu", index=0)
    experiment = ExperimentFactory(gpus_per_worker=1, name="secret-project")
    scheduler_pass()
    owner, stranger = APIClient(), APIClient()
    owner.force_authenticate(experiment.owner)
    stranger.force_authenticate(UserFactory())
    held = owner.get("/api/v1/nodes/").json()["results"][0]["devices"][0]["held_by"]
    assert held["experiment"] == experiment.pk and held["name"] == "secret-project"
    hidden = stranger.get("/api/v1/nodes/").json()["results"][0]["devices"][0]["held_by"]
    assert hidden == {"experiment": None, "name": "in use", "task": "worker"}
