"""An allocation's holder is a generic reference to its trial: queries still reach the trial's
experiment, and a trial deleted takes its allocations (and their measurements) with it, as the
foreign key's CASCADE did."""

import pytest
from django.utils import timezone

from tests.factories import DeviceFactory, NodeFactory, TrialFactory
from tfplatform.cluster.models import Allocation, AllocationUtilization, Device
from tfplatform.cluster.services import allocations_release
from tfplatform.experiments.models import Trial

pytestmark = pytest.mark.django_db


def _held() -> tuple[Allocation, Trial]:
    device = DeviceFactory(node=NodeFactory(), kind=Device.Kind.GPU, index=0)
    trial = TrialFactory()
    allocation = Allocation.objects.create(holder=trial, node=device.node, device=device)
    now = timezone.now()
    AllocationUtilization.objects.create(allocation=allocation, samples=1, percent_sum=50.0,
                                         last_percent=50.0, first_at=now, last_at=now)
    return allocation, trial


def test_the_holder_is_the_trial_and_queries_reach_its_experiment() -> None:
    allocation, trial = _held()
    assert allocation.holder == trial
    assert list(trial.allocations.all()) == [allocation]
    assert Allocation.objects.get(trial__experiment=trial.experiment) == allocation
    assert allocations_release(trial_id=trial.pk) == 1


@pytest.mark.parametrize("deleted", ["trial", "experiment"])
def test_deleting_the_trial_deletes_its_allocations(deleted: str) -> None:
    kept, _ = _held()
    _, trial = _held()
    (trial if deleted == "trial" else trial.experiment).delete()
    assert list(Allocation.objects.all()) == [kept]
    assert list(AllocationUtilization.objects.values_list("allocation_id", flat=True)) == [
        kept.pk]
