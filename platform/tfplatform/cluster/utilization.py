"""Cluster-wide utilization: what the cluster holds and uses now, and its recorded history."""

from dataclasses import asdict, dataclass
from datetime import timedelta

from django.db.models import Count, Q
from django.utils import timezone

from tfplatform.cluster.models import Device, Node, UtilizationSample

# The scheduler records at most this often; a week of samples at that rate is ~60k rows.
SAMPLE_SECONDS = 10.0
KEEP = timedelta(days=7)


@dataclass(frozen=True)
class Utilization:
    gpus_total: int
    gpus_used: int
    cpu_slots_total: int
    cpu_slots_used: int
    queued: int
    running: int


def utilization_now(*, queued: int, running: int) -> Utilization:
    """The devices held now; the experiment counts come from the experiments app
    (`experiment_state_counts`), which this app does not import."""
    # A lost node's devices are no capacity; its allocations are being failed and released.
    live = ~Q(node__state=Node.State.LOST)
    # Both conditions in one Q: a device with no allocation at all also joins a NULL released_at.
    held = Q(allocations__isnull=False, allocations__released_at__isnull=True)
    gpu, cpu = Q(kind=Device.Kind.GPU), Q(kind=Device.Kind.CPU)
    # distinct: the join to allocations repeats a device once per (past) allocation.
    devices = Device.objects.filter(live).aggregate(
        gpus_total=Count("pk", filter=gpu, distinct=True),
        gpus_used=Count("pk", filter=gpu & held, distinct=True),
        cpu_slots_total=Count("pk", filter=cpu, distinct=True),
        cpu_slots_used=Count("pk", filter=cpu & held, distinct=True),
    )
    return Utilization(**devices, queued=queued, running=running)


def utilization_record(*, queued: int, running: int) -> UtilizationSample:
    """Store one sample of the cluster as it is now and forget samples older than KEEP."""
    now = timezone.now()
    sample = UtilizationSample.objects.create(
        recorded_at=now, **asdict(utilization_now(queued=queued, running=running)))
    UtilizationSample.objects.filter(recorded_at__lt=now - KEEP).delete()
    return sample


def utilization_samples(*, limit: int) -> list[UtilizationSample]:
    """The newest `limit` samples, oldest first, as a chart draws them."""
    newest = UtilizationSample.objects.order_by("-recorded_at", "-id")[:limit]
    return list(reversed(newest))
