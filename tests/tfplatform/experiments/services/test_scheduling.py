from typing import Any

import pytest

from tests.factories import DeviceFactory, ExperimentFactory, NodeFactory, TeamFactory, UserFactory
from tests.fixtures_settings import PlatformSettingsOverride
from tfplatform.cluster.models import Allocation
from tfplatform.cluster.services import node_heartbeat
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.selectors.scheduling import experiment_queue_position
from tfplatform.experiments.services.execution import trial_outcome_record
from tfplatform.experiments.services.scheduling import scheduler_pass
from tfplatform.experiments.services.transitions import experiment_transition
from tfplatform.experiments.services.trials import trial_request_stop, trial_start
from training.spec import TrialOutcome

pytestmark = pytest.mark.django_db


def node_with(*, gpus: int = 0, cpus: int = 1, **kwargs: object) -> object:
    node = NodeFactory(**kwargs)
    for index in range(gpus):
        DeviceFactory(node=node, kind="gpu", index=index)
    for index in range(cpus):
        DeviceFactory(node=node, kind="cpu", index=index)
    return node


def test_cpu_experiment_takes_a_cpu_slot_and_creates_a_trial() -> None:
    node_with(cpus=1)
    experiment = ExperimentFactory()
    assert scheduler_pass() == 1
    experiment.refresh_from_db()
    assert experiment.state == "scheduled"
    allocation = Allocation.objects.get()
    assert allocation.device.kind == "cpu" and allocation.holder.experiment == experiment


def test_gang_gets_all_devices_or_none() -> None:
    node_with(gpus=2)
    node_with(gpus=1)
    experiment = ExperimentFactory(workers=2, gpus_per_worker=2)
    assert scheduler_pass() == 0
    experiment.refresh_from_db()
    assert experiment.state == "queued"
    assert Allocation.objects.count() == 0
    assert "Needs 2 GPUs on one node; the largest free block is 2" in experiment.pending_reason


def test_multi_worker_gang_spans_nodes() -> None:
    node_with(gpus=1, cpus=0)
    node_with(gpus=1, cpus=0)
    experiment = ExperimentFactory(workers=2, gpus_per_worker=1)
    assert scheduler_pass() == 1
    nodes = set(Allocation.objects.values_list("node__hostname", flat=True))
    assert len(nodes) == 2
    assert Experiment.objects.get(pk=experiment.pk).state == "scheduled"


def test_best_fit_keeps_large_blocks_whole() -> None:
    node_with(gpus=4, cpus=0, hostname="big")
    node_with(gpus=1, cpus=0, hostname="small")
    ExperimentFactory(gpus_per_worker=1)
    scheduler_pass()
    assert Allocation.objects.get().node.hostname == "small"


def test_priority_then_submission_order() -> None:
    node_with(cpus=1)
    first = ExperimentFactory()
    urgent = ExperimentFactory(priority=10)
    scheduler_pass()
    assert Experiment.objects.get(pk=urgent.pk).state == "scheduled"
    first.refresh_from_db()
    assert first.state == "queued"
    assert first.pending_reason == "Waiting for a free CPU slot on a worker node."
    assert experiment_queue_position(experiment=first) == 1


def test_team_quota_holds() -> None:
    node_with(gpus=4, cpus=0)
    team = TeamFactory(gpu_quota=2)
    owner = UserFactory(team=team)
    ExperimentFactory(owner=owner, gpus_per_worker=2)
    blocked = ExperimentFactory(owner=owner, gpus_per_worker=1)
    scheduler_pass()
    blocked.refresh_from_db()
    assert blocked.state == "queued"
    assert "Team quota of 2 GPUs: 2 in use" in blocked.pending_reason


def test_a_user_without_a_team_has_a_quota_of_their_own(settings: Any,
    platform_settings_override: PlatformSettingsOverride) -> None:
    platform_settings_override(user_gpu_quota=2)
    node_with(gpus=4, cpus=0)
    loner, other = UserFactory(), UserFactory()
    ExperimentFactory(owner=loner, gpus_per_worker=2)
    blocked = ExperimentFactory(owner=loner, gpus_per_worker=1)
    neighbour = ExperimentFactory(owner=other, gpus_per_worker=2)  # a quota of their own
    assert scheduler_pass() == 2
    assert reason(blocked).startswith("Quota of a user without a team of 2 GPUs: 2 in use")
    assert Experiment.objects.get(pk=neighbour.pk).state == "scheduled"


def test_no_nodes_says_so() -> None:
    experiment = ExperimentFactory()
    scheduler_pass()
    experiment.refresh_from_db()
    assert experiment.pending_reason.startswith("No worker node is online")


def test_cordoned_node_gets_no_work() -> None:
    node_with(cpus=1, state="cordoned")
    experiment = ExperimentFactory()
    assert scheduler_pass() == 0
    experiment.refresh_from_db()
    assert experiment.state == "queued"


# Backfill, preemption and pending reasons. Trials start, end and are preempted through the
# same services a worker node uses; only the training itself is left out.


def started(experiment: Experiment) -> Trial:
    """The experiment's live trial, taken up as its worker node would."""
    trial = experiment.trials.get(state__in=["pending", "running"])
    trial_start(trial_id=trial.pk)
    experiment_transition(experiment=experiment, to=Experiment.State.RUNNING)
    return trial


def running(**kwargs: object) -> Trial:
    experiment = ExperimentFactory(**kwargs)
    assert scheduler_pass() == 1
    return started(experiment)


def ended(trial: Trial, *, status: str = "completed") -> None:
    trial_outcome_record(
        trial=trial, outcome=TrialOutcome(status=status, retryable=False, exit_reason=status)
    )


def held_by(experiment: Experiment) -> set[tuple[str, int]]:
    return set(
        Allocation.objects.filter(
            trial__experiment=experiment, released_at__isnull=True
        ).values_list("node__hostname", "device__index")
    )


def reason(experiment: Experiment) -> str:
    experiment.refresh_from_db()
    return experiment.pending_reason


def test_small_job_backfills_only_outside_the_heads_reservation() -> None:
    node_with(gpus=4, cpus=0, hostname="a")
    first = running(gpus_per_worker=2)
    node_with(gpus=3, cpus=0, hostname="b")
    head = ExperimentFactory(gpus_per_worker=4)
    small = ExperimentFactory(gpus_per_worker=1)
    pair = ExperimentFactory(gpus_per_worker=2)
    late = ExperimentFactory(gpus_per_worker=1)

    assert scheduler_pass() == 2
    # Best fit alone would have put the small job in a's two free GPUs: the head's reservation.
    assert {node for node, _ in held_by(small)} == {"b"}
    assert {node for node, _ in held_by(pair)} == {"b"}
    assert held_by(head) == set()
    assert "It has a reservation on a (waiting for 1 running trial to end)" in reason(head)
    assert experiment_queue_position(experiment=Experiment.objects.get(pk=head.pk)) == 1
    assert "Free devices are reserved for experiments ahead of it." in reason(late)
    assert held_by(late) == set()

    ended(first)
    assert scheduler_pass() == 1
    assert held_by(head) == {("a", 0), ("a", 1), ("a", 2), ("a", 3)}
    assert Experiment.objects.get(pk=late.pk).state == "queued"


def test_head_that_fits_nowhere_reserves_nothing() -> None:
    node_with(gpus=2, cpus=0)
    running(gpus_per_worker=1)
    impossible = ExperimentFactory(owner=UserFactory(team=TeamFactory(gpu_quota=8)),
                                   gpus_per_worker=8)
    small = ExperimentFactory(gpus_per_worker=1)
    assert scheduler_pass() == 1
    assert Experiment.objects.get(pk=small.pk).state == "scheduled"
    assert reason(impossible) == (
        "Needs 8 GPUs on one node; the largest free block is 1."
    )


def test_reservation_waits_for_the_trial_expected_to_end_first() -> None:
    node_with(gpus=2, cpus=0, hostname="old")
    node_with(gpus=2, cpus=0, hostname="new")
    running(gpus_per_worker=2)
    running(gpus_per_worker=2)
    head = ExperimentFactory(gpus_per_worker=2)
    scheduler_pass()
    # The oldest trial is expected to end first; both hold exactly what the head needs.
    assert "reservation on old" in reason(head)


def test_stopping_trial_is_waited_for_instead_of_preempting() -> None:
    node_with(gpus=2, cpus=0, hostname="solo")
    low = running(gpus_per_worker=2)
    trial_request_stop(trial=low, reason="canceled")
    urgent = ExperimentFactory(gpus_per_worker=2, priority=10)
    scheduler_pass()
    assert reason(urgent) == (
        "Waiting for 1 stopping trial to release devices; devices on solo are reserved for it."
    )
    low.refresh_from_db()
    assert low.stop_reason == "canceled"


def test_higher_priority_preempts_a_lower_priority_trial_and_starts_after_release() -> None:
    node_with(gpus=2, cpus=0, hostname="solo")
    low = running(gpus_per_worker=2)
    urgent = ExperimentFactory(gpus_per_worker=2, priority=10)

    assert scheduler_pass() == 0
    low.refresh_from_db()
    assert low.stop_reason == "preempted"
    assert held_by(urgent) == set()  # nothing is taken before the victim lets go
    expected = (
        "Waiting for devices: preempting 1 lower-priority trial; devices on solo are reserved"
        " for it."
    )
    assert reason(urgent) == expected

    assert scheduler_pass() == 0  # still waiting for the same victim: no further preemption
    assert reason(urgent) == expected

    ended(low, status="canceled")  # what the supervisor reports once the victim stopped
    victim = Experiment.objects.get(pk=low.experiment_id)
    assert victim.state == "queued"
    assert scheduler_pass() == 1
    assert held_by(urgent) == {("solo", 0), ("solo", 1)}
    victim.refresh_from_db()
    assert victim.state == "queued"
    assert experiment_queue_position(experiment=victim) == 1


def test_equal_priority_is_never_preempted() -> None:
    node_with(gpus=2, cpus=0, hostname="solo")
    peer = running(gpus_per_worker=2, priority=5)
    waiting = ExperimentFactory(gpus_per_worker=2, priority=5)
    scheduler_pass()
    peer.refresh_from_db()
    assert peer.stop_reason == ""
    assert "It has a reservation on solo" in reason(waiting)


def test_higher_priority_trial_is_never_preempted_by_lower() -> None:
    node_with(gpus=2, cpus=0)
    important = running(gpus_per_worker=2, priority=10)
    ExperimentFactory(gpus_per_worker=2, priority=1)
    scheduler_pass()
    important.refresh_from_db()
    assert important.stop_reason == ""


def test_preempts_the_fewest_of_the_lowest_priority() -> None:
    node_with(gpus=4, cpus=0)
    one = running(gpus_per_worker=1)
    two = running(gpus_per_worker=2)
    higher = running(gpus_per_worker=1, priority=1)
    urgent = ExperimentFactory(gpus_per_worker=2, priority=10)
    scheduler_pass()
    stops = dict(Trial.objects.values_list("pk", "stop_reason"))
    assert (stops[one.pk], stops[two.pk], stops[higher.pk]) == ("", "preempted", "")
    assert "preempting 1 lower-priority trial;" in reason(urgent)


def test_preempts_on_the_node_with_the_lowest_priority_victim() -> None:
    node_with(gpus=2, cpus=0, hostname="p2")
    node_with(gpus=2, cpus=0, hostname="p1")
    middle = running(gpus_per_worker=2, priority=2)
    lowest = running(gpus_per_worker=2, priority=1)
    ExperimentFactory(gpus_per_worker=2, priority=5)
    scheduler_pass()
    middle.refresh_from_db()
    lowest.refresh_from_db()
    assert (middle.stop_reason, lowest.stop_reason) == ("", "preempted")


def test_devices_freed_for_a_preemptor_are_not_backfilled() -> None:
    node_with(gpus=4, cpus=0, hostname="solo")
    low = running(gpus_per_worker=2)
    urgent = ExperimentFactory(gpus_per_worker=4, priority=10)
    small = ExperimentFactory(gpus_per_worker=1)
    assert scheduler_pass() == 0
    low.refresh_from_db()
    assert low.stop_reason == "preempted"
    assert "Free devices are reserved for experiments ahead of it." in reason(small)
    ended(low, status="canceled")
    assert scheduler_pass() == 1
    assert len(held_by(urgent)) == 4


def test_quota_blocked_experiment_neither_preempts_nor_reserves() -> None:
    node_with(gpus=2, cpus=0)
    team = TeamFactory(gpu_quota=1)
    low = running(gpus_per_worker=1)
    blocked = ExperimentFactory(owner=UserFactory(team=team), gpus_per_worker=2, priority=10)
    small = ExperimentFactory(gpus_per_worker=1)
    assert scheduler_pass() == 1
    low.refresh_from_db()
    assert low.stop_reason == ""
    assert reason(blocked).startswith("Team quota of 1 GPUs: 0 in use, this needs 2.")
    assert Experiment.objects.get(pk=small.pk).state == "scheduled"


def test_preempted_gang_spanning_nodes_frees_both() -> None:
    node_with(gpus=1, cpus=0, hostname="x")
    node_with(gpus=1, cpus=0, hostname="y")
    low = running(workers=2, gpus_per_worker=1)
    urgent = ExperimentFactory(workers=2, gpus_per_worker=1, priority=3)
    scheduler_pass()
    assert "preempting 1 lower-priority trial; devices on x, y are reserved" in reason(urgent)
    ended(low, status="canceled")
    assert scheduler_pass() == 1
    assert {node for node, _ in held_by(urgent)} == {"x", "y"}


def test_long_reasons_fit_the_column() -> None:
    for index in range(5):
        node_with(gpus=1, cpus=0, hostname=f"{'n' * 150}-{index}")
    big = TeamFactory(gpu_quota=10)
    running(owner=UserFactory(team=big), workers=5, gpus_per_worker=1)
    head = ExperimentFactory(owner=UserFactory(team=big), workers=5, gpus_per_worker=1)
    scheduler_pass()
    assert 0 < len(reason(head)) <= 300


def test_a_node_whose_work_disk_is_full_gets_nothing_and_the_queue_says_why(
    settings: Any, platform_settings_override: PlatformSettingsOverride,
) -> None:
    platform_settings_override(work_disk_min_free_mb=100)
    full = node_with(cpus=1, hostname="crowded", work_disk_free_bytes=5 * 2**20)
    experiment = ExperimentFactory()
    assert scheduler_pass() == 0
    experiment.refresh_from_db()
    assert experiment.pending_reason.startswith(
        "Out of disk space for trials on crowded (5 MB free): new trials need 100 MB free"
    ), experiment.pending_reason

    node_with(cpus=1, hostname="roomy", work_disk_free_bytes=None)  # not measured yet: fine
    assert scheduler_pass() == 1
    assert Allocation.objects.get().node.hostname == "roomy"

    second = ExperimentFactory()
    assert scheduler_pass() == 0
    second.refresh_from_db()
    assert "Waiting for a free CPU slot" in second.pending_reason
    assert "crowded (5 MB free)" in second.pending_reason
    node_heartbeat(hostname=full.hostname, work_disk_free_bytes=500 * 2**20)  # space freed
    assert scheduler_pass() == 1
    assert {a.node.hostname for a in Allocation.objects.all()} == {"roomy", "crowded"}
