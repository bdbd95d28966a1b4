from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Prefetch, Q, QuerySet
from django.utils import timezone

from tfplatform.cluster.models import Allocation, Device, Node


def node_list() -> QuerySet[Node]:
    active = Allocation.objects.filter(released_at__isnull=True).select_related("trial__experiment")
    return Node.objects.prefetch_related(
        Prefetch("devices", queryset=Device.objects.order_by("kind", "index")),
        Prefetch("allocations", queryset=active, to_attr="active_allocations"),
    )


def nodes_schedulable() -> QuerySet[Node]:
    fresh_after = timezone.now() - timedelta(seconds=settings.PLATFORM["NODE_LOST_SECONDS"])
    return Node.objects.filter(state=Node.State.READY, last_heartbeat__gte=fresh_after)


def devices_free() -> QuerySet[Device]:
    return Device.objects.annotate(
        held=Count("allocations", filter=Q(allocations__released_at__isnull=True))
    ).filter(held=0, node__in=nodes_schedulable())


def gpus_in_use_by_team(*, team_id: int) -> int:
    return Allocation.objects.filter(
        released_at__isnull=True, device__kind=Device.Kind.GPU, trial__experiment__team_id=team_id
    ).count()
