"""Pending reasons become a bounded `reason` label: every sentence the scheduler writes maps to
its kind, counts and host names dropped."""

import pytest

from tests.factories import ExperimentFactory
from tfplatform.cluster.placement import TaskNeed, disk_full_text, pending_reason
from tfplatform.experiments.models import Experiment
from tfplatform.monitoring.selectors import pending_by_team_and_reason

pytestmark = pytest.mark.django_db
GPU = [TaskNeed(task_type="worker", task_index=0, gpus=2)]
CPU = [TaskNeed(task_type="worker", task_index=0, gpus=0)]
CPUS = [TaskNeed(task_type="worker", task_index=0, gpus=0, cpus=3)]


@pytest.mark.parametrize(("text", "kind"), [
    (pending_reason(needs=GPU, free={}), "no_nodes"),
    (pending_reason(needs=GPU, free={1: {"gpu": [7]}}), "gpus"),
    (pending_reason(needs=CPU, free={1: {}}), "cpu_slots"),
    (pending_reason(needs=CPUS, free={1: {"cpu": [4, 5]}}), "cpu_slots"),
    (disk_full_text(disk_full={"gpu-1": 2**20}, min_free_bytes=2**28), "disk_pressure"),
    ("Team quota of 4 GPUs: 4 in use, this needs 2. Queue position 3.", "quota"),
    ("Quota of a user without a team of 4 GPUs: 4 in use, this needs 1.", "quota"),
    ("Waiting for devices: preempting 1 lower-priority trial; devices on a are reserved.",
     "preempting"),
    ("Waiting for 2 stopping trials to release devices; devices on a are reserved for it.",
     "stopping_trials"),
    ("Waiting for the scheduler.", "scheduler"),
    ("Preempted; resumes from its last checkpoint.", "preempted"),
    ("Resizing (shrunk from 4 GPU for experiment 3 (priority 5)); resumes from its checkpoint "
     "at the largest size that fits.", "resizing"),
    ("Restarting after: exit code 1", "restarting"),
    ("", "none"),
])
def test_each_reason_the_platform_writes_has_its_kind(text: str, kind: str) -> None:
    ExperimentFactory(state=Experiment.State.QUEUED, pending_reason=text)
    assert pending_by_team_and_reason() == {("", kind): 1}


def test_scheduled_experiments_count_as_starting_or_by_their_build() -> None:
    ExperimentFactory(state=Experiment.State.SCHEDULED, pending_reason="")
    ExperimentFactory(state=Experiment.State.SCHEDULED,
                      pending_reason="Building environment 'jokes' on gpu-1.")
    ExperimentFactory(state=Experiment.State.RUNNING, pending_reason="")
    assert pending_by_team_and_reason() == {("", "starting"): 1, ("", "environment_build"): 1}
