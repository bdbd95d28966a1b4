"""The staff cluster console: nodes, devices and their holders, node state, utilization."""

from collections import defaultdict
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ObjectDoesNotExist
from django.db.models import prefetch_related_objects
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from tfplatform.cluster.models import Allocation, Device, Node, UtilizationSample
from tfplatform.cluster.selectors import (
    allocation_idle_since,
    node_disk_pressure,
    node_list,
    team_shares,
)
from tfplatform.cluster.services import node_set_state
from tfplatform.cluster.utilization import SAMPLE_SECONDS, utilization_now, utilization_samples
from tfplatform.experiments.models import Experiment
from tfplatform.experiments.selectors.experiments import experiment_state_counts

# One hour of history at the scheduler's sampling rate.
CHART_SAMPLES = int(3600 / SAMPLE_SECONDS)
NODE_ACTIONS = {
    "cordon": Node.State.CORDONED,
    "drain": Node.State.DRAINING,
    "enable": Node.State.READY,
}
# Node states drawn with the pill colours experiments already use, so the palette stays one.
STATE_PILL: dict[str, str] = {
    Node.State.READY: "state-completed",
    Node.State.DRAINING: "state-running",
    Node.State.LOST: "state-failed",
}
View = Callable[..., HttpResponse]


def staff_only(view: View) -> View:
    """Anonymous users log in; signed-in non-staff learn nothing, not even that it exists."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_staff:
            raise Http404("Not found.")
        return view(request, *args, **kwargs)

    return wrapper


@staff_only
def cluster_page(request: HttpRequest) -> HttpResponse:
    nodes = list(node_list())
    allocations = [a for node in nodes for a in node.active_allocations]  # type: ignore[attr-defined]
    # One query for every holder's owner instead of one per device row.
    prefetch_related_objects(allocations, "holder__experiment__owner")
    now = timezone.now()
    rows = []
    idle_count = 0
    for node in nodes:
        # A GPU shared by holders of shares has a row per holder.
        holders: dict[int, list[Allocation | None]] = defaultdict(list)
        for allocation in node.active_allocations:  # type: ignore[attr-defined]
            holders[allocation.device_id].append(allocation)
        age = (now - node.last_heartbeat).total_seconds() if node.last_heartbeat else None
        devices = sorted(
            ((device, holder, _measured(holder))
             for device in node.devices.all() for holder in holders.get(device.pk) or [None]),
            key=lambda row: (row[0].kind != Device.Kind.GPU, row[0].index),
        )
        idle_count += sum(1 for *_, measured in devices if measured and measured["idle_since"])
        rows.append(
            {
                "node": node,
                "pill": STATE_PILL.get(node.state, ""),
                # Heartbeats come every few seconds; "0 minutes ago" would hide a stalled one.
                "heartbeat_seconds": None if age is None else max(int(age), 0),
                "disk_full": node_disk_pressure(node=node),
                # Accelerators first: they are what the queue waits for.
                "devices": devices,
            }
        )
    context = {
        "rows": rows,
        "idle_minutes": settings.PLATFORM.idle_gpu_minutes,
        "idle_count": idle_count,
        "now": utilization_now(**experiment_state_counts()),
        "workspaces": experiment_state_counts(kind=Experiment.Kind.WORKSPACE),
        "teams": team_shares(),
        "ready_nodes": sum(1 for node in nodes if node.state == Node.State.READY),
        "series": _series(utilization_samples(limit=CHART_SAMPLES)),
        "sample_seconds": int(SAMPLE_SECONDS),
    }
    return render(request, "cluster/index.html", context)


def _measured(holder: Allocation | None) -> dict[str, Any] | None:
    """A held GPU's NVML readings and whether it sits idle; None when not measured (emulated
    slots, CPU slots, no sample yet): the page says so rather than show 0."""
    if holder is None:
        return None
    try:
        utilization = holder.utilization
    except ObjectDoesNotExist:
        return None
    return {"last": utilization.last_percent, "mean": utilization.mean_percent,
            "idle_since": allocation_idle_since(allocation=holder)}


def _series(samples: list[UtilizationSample]) -> dict[str, list[Any]]:
    fields = ["gpus_total", "gpus_used", "cpu_slots_total", "cpu_slots_used", "queued", "running"]
    series: dict[str, list[Any]] = {"recorded_at": [s.recorded_at.isoformat() for s in samples]}
    for field in fields:
        series[field] = [getattr(s, field) for s in samples]
    return series


@staff_only
@require_POST
def cluster_node_action(request: HttpRequest, node_id: int) -> HttpResponse:
    node = node_list().filter(pk=node_id).first()
    state = NODE_ACTIONS.get(request.POST.get("action", ""))
    if node is None or state is None:
        raise Http404("Not found.")
    node = node_set_state(node=node, state=state, actor=request.user)
    messages.success(request, f"{node.hostname} is now {node.state}.")
    return redirect("cluster")
