from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Count, Prefetch, Q, QuerySet, Sum
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now

from tfplatform.accounts.models import User
from tfplatform.accounts.visibility import visible_to
from tfplatform.cluster.elastic import Size, elastic_sizes
from tfplatform.cluster.models import Allocation, Device, Node
from tfplatform.cluster.placement import (
    WHOLE_MILLI,
    SharedMap,
    TaskNeed,
    gang_place,
    gpus_text,
    pending_reason,
    placements_gpu_milli,
    share_of,
    share_pending_reason,
    task_needs,
)
from tfplatform.cluster.pools import nodes_eligible, where_text


def node_list() -> QuerySet[Node]:
    active = (Allocation.objects.filter(released_at__isnull=True)
              .select_related("utilization").prefetch_related("holder__experiment"))
    return Node.objects.prefetch_related(
        Prefetch("devices", queryset=Device.objects.order_by("kind", "index")),
        Prefetch("allocations", queryset=active, to_attr="active_allocations"),
    )


def allocations_visible_ids(*, user: User | AnonymousUser) -> set[int]:
    """Live allocations whose experiment `user` may see (its owner, team, or staff)."""
    live = Allocation.objects.filter(released_at__isnull=True)
    return set(visible_to(queryset=live, user=user, through="trial__experiment")
               .values_list("pk", flat=True))


# A GPU at or below this utilization (percent) is doing nothing: NVML reports a few percent
# for a context that only holds memory.
IDLE_PERCENT = 1.0


def allocation_idle_since(*, allocation: Allocation) -> datetime | None:
    """When a held, measured GPU went idle, if it has stayed idle (~0 %) for
    PLATFORM_IDLE_GPU_MINUTES by its own samples; else None. Unmeasured devices (emulated
    slots, no sample yet) never count as idle: there is no evidence."""
    if allocation.released_at is not None:
        return None
    try:
        measured = allocation.utilization
    except ObjectDoesNotExist:
        return None
    since = measured.busy_at or measured.first_at
    threshold = timedelta(minutes=float(settings.PLATFORM.idle_gpu_minutes))
    return since if measured.last_at - since >= threshold else None


def heartbeat_fresh_after() -> CombinedExpression:
    """The oldest heartbeat that still counts, on the database's clock: heartbeats are stamped
    with it too, so a node (or scheduler) whose clock is off by minutes is judged right."""
    return Now() - timedelta(seconds=settings.PLATFORM.node_lost_seconds)


def disk_free_min_bytes() -> int:
    return int(settings.PLATFORM.work_disk_min_free_mb) * 2**20


def nodes_online() -> QuerySet[Node]:
    return Node.objects.filter(state=Node.State.READY, last_heartbeat__gte=heartbeat_fresh_after())


def nodes_schedulable() -> QuerySet[Node]:
    """Online nodes that may take new trials: not under disk pressure (unknown counts as fine)."""
    return nodes_online().exclude(work_disk_free_bytes__lt=disk_free_min_bytes())


def node_disk_pressure(*, node: Node) -> bool:
    free = node.work_disk_free_bytes
    return free is not None and free < disk_free_min_bytes()


def devices_free() -> QuerySet[Device]:
    return Device.objects.annotate(
        held=Count("allocations", filter=Q(allocations__released_at__isnull=True))
    ).filter(held=0, node__in=nodes_schedulable())


def gpus_in_use_by_team(*, team_id: int) -> float:
    """GPUs its trials hold, shares of GPUs as their parts (two halves: 1)."""
    milli = Allocation.objects.filter(
        released_at__isnull=True, device__kind=Device.Kind.GPU, trial__experiment__team_id=team_id
    ).aggregate(n=Sum("share_milli"))["n"]
    return (milli or 0) / WHOLE_MILLI


# node id → device kind → device ids, the shape the scheduler places gangs on.
DeviceMap = dict[int, dict[str, list[int]]]


@dataclass(frozen=True)
class Capacity:
    """Devices on nodes accepting work: all of them, and those nobody holds right now; GPUs
    that holders of shares hold (the room a new share may take) and each GPU's memory (MB)."""

    free: DeviceMap
    total: DeviceMap
    shared: SharedMap = field(default_factory=dict)
    memory_mb: dict[int, int] = field(default_factory=dict)

    def _count(self, devices: DeviceMap, kind: str) -> int:
        return sum(len(kinds.get(kind, ())) for kinds in devices.values())

    @property
    def nodes(self) -> int:
        return len(self.total)

    @property
    def gpus_free(self) -> int:
        return self._count(self.free, Device.Kind.GPU)

    @property
    def gpus_total(self) -> int:
        return self._count(self.total, Device.Kind.GPU)

    @property
    def cpu_slots_free(self) -> int:
        return self._count(self.free, Device.Kind.CPU)

    @property
    def cpu_slots_total(self) -> int:
        return self._count(self.total, Device.Kind.CPU)

    @property
    def gpu_nodes_free(self) -> int:
        """Nodes with at least one free GPU."""
        return sum(1 for kinds in self.free.values() if kinds.get(Device.Kind.GPU))

    @property
    def largest_gpu_block(self) -> int:
        """The most free GPUs on one node: the largest worker that could start now."""
        return max((len(kinds.get(Device.Kind.GPU, ())) for kinds in self.free.values()), default=0)

    @property
    def largest_gpu_node(self) -> int:
        return max(
            (len(kinds.get(Device.Kind.GPU, ())) for kinds in self.total.values()), default=0
        )

    @property
    def largest_cpu_node(self) -> int:
        return max(
            (len(kinds.get(Device.Kind.CPU, ())) for kinds in self.total.values()), default=0
        )

    @property
    def gpus_shared(self) -> int:
        return sum(len(devices) for devices in self.shared.values())

    @property
    def share_room_text(self) -> str:
        """The most room left on one shared GPU: "0.5 of a GPU", or "none"."""
        used = min((milli for devices in self.shared.values() for milli in devices.values()),
                   default=WHOLE_MILLI)
        return f"{gpus_text(milli=WHOLE_MILLI - used)} of a GPU" if used < WHOLE_MILLI else "none"


@dataclass(frozen=True)
class TeamQuota:
    team: str
    gpu_quota: int
    gpus_in_use: float
    gpu_limit: int = 0  # with borrowing (Team.gpu_limit); 0: the quota is a hard cap

    @property
    def in_use_text(self) -> str:
        return f"{self.gpus_in_use:g}"  # shares as parts: 2, 1.5


@dataclass(frozen=True)
class ResourceFit:
    """Whether a request of this size could start now, and why (not)."""

    could_start: bool
    message: str


def capacity_now(*, pool: str = "", gpu_type: str = "") -> Capacity:
    """What nodes accepting work have (only those of `pool`, with GPUs of `gpu_type`)."""
    nodes = nodes_schedulable()
    if pool:
        nodes = nodes.filter(pool=pool)
    if gpu_type:
        nodes = nodes.filter(gpu_type__iexact=gpu_type)
    schedulable = list(nodes.values_list("pk", flat=True))
    free: DeviceMap = {node: {} for node in schedulable}
    total: DeviceMap = {node: {} for node in schedulable}
    memory_mb: dict[int, int] = {}
    devices = Device.objects.filter(node_id__in=schedulable).order_by("node_id", "kind", "index")
    free_ids = set(devices_free().values_list("pk", flat=True))
    for device, node, kind, memory in devices.values_list("pk", "node_id", "kind",
                                                          "memory_bytes"):
        total[node].setdefault(kind, []).append(device)
        if device in free_ids:
            free[node].setdefault(kind, []).append(device)
        if kind == Device.Kind.GPU:
            memory_mb[device] = memory // 2**20
    return Capacity(free=free, total=total, shared=gpus_shared(node_ids=schedulable),
                    memory_mb=memory_mb)


def gpus_shared(*, node_ids: list[int]) -> SharedMap:
    """The thousandths of each GPU of these nodes that holders of shares hold, as the scheduler
    sees them: a GPU that also has a whole holder is left out, it is never shared."""
    live = Allocation.objects.filter(released_at__isnull=True, node_id__in=node_ids,
                                     device__kind=Device.Kind.GPU)
    whole = set(live.filter(share_milli__gte=WHOLE_MILLI).values_list("device_id", flat=True))
    parts = (live.filter(share_milli__lt=WHOLE_MILLI).exclude(device_id__in=whole)
             .order_by().values_list("node_id", "device_id").annotate(milli=Sum("share_milli")))
    shared: SharedMap = {}
    for node, device, milli in parts:
        shared.setdefault(node, {})[device] = milli
    return shared


@dataclass(frozen=True)
class Misfit:
    """Why a request could never run: `on` is what is wrong ("pool", "gpu_type" or "size")."""

    on: str
    text: str


def cluster_misfit(*, needs: list[TaskNeed], pool: str = "", gpu_type: str = "") -> Misfit | None:
    """Why the gang could never be placed on the registered nodes (of `pool`, with GPUs of
    `gpu_type`), even all idle; None when it could, or when no node is registered yet (the
    cluster is being set up: it may grow).

    Nodes that are offline, cordoned or lost count: they may come back."""
    rows = list(Node.objects.values_list("pk", "pool", "gpu_type"))
    if not rows:
        return None
    pools = {node: node_pool for node, node_pool, _ in rows}
    gpu_types = {node: node_gpu_type for node, _, node_gpu_type in rows}
    eligible = nodes_eligible(pool=pool, gpu_type=gpu_type, node_pools=pools,
                              node_gpu_types=gpu_types)
    if pool and pool not in pools.values():
        return Misfit("pool", f"no node is in pool '{pool}'; the pools are "
                              f"{', '.join(sorted(set(pools.values())))}")
    if eligible is not None and not eligible and not pool and not gpu_type:
        return Misfit("pool", "every registered node is a Spark cluster's, which takes only "
                              "experiments that ask for its pool: "
                              f"{', '.join(sorted(set(pools.values())))}")
    if eligible is not None and not eligible:
        within = f" in pool '{pool}'" if pool else ""
        types = sorted({t for n, t in gpu_types.items() if t and (not pool or pools[n] == pool)})
        known = ", ".join(f"'{t}'" for t in types) if types else "none"
        return Misfit("gpu_type", f"no node{within} has GPUs of type '{gpu_type}'; the types"
                                  f"{within} are {known}")
    total: DeviceMap = {node: {} for node in (pools if eligible is None else eligible)}
    memory_mb: dict[int, int] = {}
    devices = Device.objects.filter(node_id__in=list(total)).order_by("node_id", "kind", "index")
    for device, node, kind, memory in devices.values_list("pk", "node_id", "kind",
                                                          "memory_bytes"):
        total[node].setdefault(kind, []).append(device)
        memory_mb[device] = memory // 2**20
    if gang_place(needs=needs, free=total, memory_mb=memory_mb) is not None:
        return None
    misfit = _misfit(Capacity(free=total, total=total), needs, memory_mb=memory_mb)
    where = where_text(pool=pool, gpu_type=gpu_type)
    return Misfit("size", f"{misfit} (nodes of {where})" if where else misfit)


@dataclass(frozen=True)
class TeamShare:
    """A team's fair share as the cluster page shows it: guaranteed, limit, weight, and what
    its trials hold now, borrowed part included (GPUs in whole units, shares as parts)."""

    team: str
    gpu_quota: int
    gpu_limit: int
    cpu_slot_quota: int
    cpu_slot_limit: int
    weight: int
    gpus_held: float
    gpus_borrowed: float
    cpu_slots_held: int
    cpu_slots_borrowed: int


def team_shares() -> list[TeamShare]:
    from tfplatform.accounts.models import Team

    held: dict[tuple[int, str, bool], int] = {}
    live = Allocation.objects.filter(
        released_at__isnull=True, device__isnull=False,
        trial__experiment__team__isnull=False,
    ).values_list("trial__experiment__team_id", "device__kind", "trial__borrowed").annotate(
        milli=Sum("share_milli"), n=Count("id"))
    for team, kind, lent, milli, count in live:
        held[team, kind, lent] = milli if kind == Device.Kind.GPU else count

    def of(team: int, kind: str, *, borrowed_only: bool) -> int:
        lent = held.get((team, kind, True), 0)
        return lent if borrowed_only else lent + held.get((team, kind, False), 0)

    gpu, cpu = Device.Kind.GPU, Device.Kind.CPU
    return [
        TeamShare(
            team=team.name, gpu_quota=team.gpu_quota,
            gpu_limit=max(team.gpu_quota, team.gpu_limit or 0),
            cpu_slot_quota=team.cpu_slot_quota,
            cpu_slot_limit=max(team.cpu_slot_quota, team.cpu_slot_limit or 0),
            weight=team.over_quota_weight,
            gpus_held=of(team.pk, gpu, borrowed_only=False) / WHOLE_MILLI,
            gpus_borrowed=of(team.pk, gpu, borrowed_only=True) / WHOLE_MILLI,
            cpu_slots_held=of(team.pk, cpu, borrowed_only=False),
            cpu_slots_borrowed=of(team.pk, cpu, borrowed_only=True),
        )
        for team in Team.objects.order_by("name")
    ]


def node_pools_and_gpu_types() -> tuple[list[str], list[str]]:
    """The pools and the GPU types of the registered nodes, for the forms' choices."""
    rows = Node.objects.values_list("pool", "gpu_type").distinct()
    return (sorted({pool for pool, _ in rows}),
            sorted({gpu_type for _, gpu_type in rows if gpu_type}))


def team_quota(*, team_id: int | None) -> TeamQuota | None:
    from tfplatform.accounts.models import Team

    team = Team.objects.filter(pk=team_id).first() if team_id is not None else None
    if team is None:
        return None
    return TeamQuota(
        team=team.name, gpu_quota=team.gpu_quota, gpus_in_use=gpus_in_use_by_team(team_id=team.pk),
        gpu_limit=max(team.gpu_quota, team.gpu_limit or 0),
    )


def resources_fit(
    *,
    capacity: Capacity,
    quota: TeamQuota | None,
    workers: int,
    gpus_per_worker: int,
    parameter_servers: int,
    queued_ahead: int = 0,
    gpu_milli: int = 0,
    gpu_memory_mb: int = 0,
    workers_min: int = 0,
    gpus_per_worker_min: int = 0,
) -> ResourceFit:
    """The scheduler's own placement rule applied to what is free now; nothing is reserved.
    A share of a GPU (`gpu_milli` thousandths, or `gpu_memory_mb`) packs as the scheduler packs
    it; an elastic range answers for the largest of its sizes that could start."""
    sizes = elastic_sizes(workers=workers, gpus_per_worker=gpus_per_worker,
                          workers_min=workers_min, gpus_per_worker_min=gpus_per_worker_min)
    gangs = [task_needs(workers=size.workers, gpus_per_worker=size.gpus_per_worker,
                        parameter_servers=parameter_servers, gpu_milli=gpu_milli,
                        gpu_memory_mb=gpu_memory_mb) for size in sizes]
    largest = _gang_fit(capacity=capacity, quota=quota, needs=gangs[0], queued_ahead=queued_ahead)
    if largest.could_start or len(sizes) == 1 or not capacity.total:
        return largest
    return _elastic_fit(capacity=capacity, quota=quota, sizes=sizes, gangs=gangs,
                        queued_ahead=queued_ahead, by_workers=bool(workers_min))


def _gang_fit(*, capacity: Capacity, quota: TeamQuota | None, needs: list[TaskNeed],
              queued_ahead: int) -> ResourceFit:
    if not capacity.total:
        return ResourceFit(False, "No worker node is online and accepting work; it would queue.")
    idle = gang_place(needs=needs, free=capacity.total, memory_mb=capacity.memory_mb)
    if idle is None:
        misfit = _misfit(capacity, needs, memory_mb=capacity.memory_mb)
        return ResourceFit(False, f"Never fits the cluster as it is: {misfit}.")
    now = gang_place(needs=needs, free=capacity.free, shared=capacity.shared,
                     memory_mb=capacity.memory_mb)
    # A share asked for as memory is so many thousandths of the GPU it gets: count the one it
    # would get now, else one it could get once devices free up.
    milli = placements_gpu_milli(placements=now or idle)
    refusal = _quota_refusal(quota=quota, milli=milli)
    if refusal:
        return ResourceFit(False, refusal)
    shared = any(need.shared for need in needs)
    if now is None:
        reason = (share_pending_reason(needs=needs) if shared
                  else pending_reason(needs=needs, free=capacity.free))
        return ResourceFit(False, f"{reason} It would queue until devices free up.")
    if quota is not None and _milli(gpus=quota.gpus_in_use) + milli > quota.gpu_quota * WHOLE_MILLI:
        return ResourceFit(
            True, f"Fits on idle devices, beyond your team's guarantee of {quota.gpu_quota} "
                  "GPUs: it would borrow them, and be preempted (then resumed) if their "
                  "owners need them.")
    return ResourceFit(True, _start_text(shared=shared, queued_ahead=queued_ahead))


def _start_text(*, shared: bool, queued_ahead: int) -> str:
    where = "a shared GPU" if shared else "free devices"
    if queued_ahead:
        return (f"Fits on {where} now; {queued_ahead} queued experiment"
                f"{'s' if queued_ahead != 1 else ''} of equal or higher priority may go first.")
    return f"Fits on {where}: it could start right away."


def _milli(*, gpus: float) -> int:
    return round(gpus * WHOLE_MILLI)


def _quota_refusal(*, quota: TeamQuota | None, milli: int) -> str:
    """Why the team's quota (or limit, with borrowing) keeps it from starting; "" when not."""
    if quota is None:
        return ""
    cap = max(quota.gpu_quota, quota.gpu_limit)
    if milli > cap * WHOLE_MILLI:
        limit = "quota" if cap == quota.gpu_quota else "limit"
        return f"Needs {gpus_text(milli=milli)} GPUs, more than your team's {limit} of {cap}."
    if _milli(gpus=quota.gpus_in_use) + milli > cap * WHOLE_MILLI:
        return (f"Your team holds {quota.in_use_text} of its {cap} GPUs; it would "
                "wait until enough of them are released.")
    return ""


def _elastic_fit(*, capacity: Capacity, quota: TeamQuota | None, sizes: list[Size],
                 gangs: list[list[TaskNeed]], queued_ahead: int, by_workers: bool) -> ResourceFit:
    """The largest size below the largest that could start now, as the scheduler starts an
    elastic experiment; said against the smallest when none could."""
    smallest = _size_text(size=sizes[-1], by_workers=by_workers)
    if gang_place(needs=gangs[-1], free=capacity.total, memory_mb=capacity.memory_mb) is None:
        misfit = _misfit(capacity, gangs[-1], memory_mb=capacity.memory_mb)
        return ResourceFit(False, f"Never fits the cluster as it is, not even at its smallest "
                                  f"size, {smallest}: {misfit}.")
    fit = ResourceFit(False, "")
    for size, needs in zip(sizes[1:], gangs[1:], strict=True):
        fit = _gang_fit(capacity=capacity, quota=quota, needs=needs, queued_ahead=queued_ahead)
        if fit.could_start:
            return ResourceFit(True, _elastic_start_text(
                capacity=capacity, sizes=sizes, size=size, gang=gangs[0], fit=fit,
                by_workers=by_workers))
    return ResourceFit(False, f"No size of its range could start now; at its smallest, "
                              f"{smallest}: {fit.message}")


def _elastic_start_text(*, capacity: Capacity, sizes: list[Size], size: Size,
                        gang: list[TaskNeed], fit: ResourceFit, by_workers: bool) -> str:
    largest = sizes[0].workers if by_workers else sizes[0].gpus_per_worker
    text = (f"Could start now at {_size_text(size=size, by_workers=by_workers)} of its "
            f"{largest} (elastic); it grows when devices free up.")
    if gang_place(needs=gang, free=capacity.total, memory_mb=capacity.memory_mb) is None:
        # It grows only as far as the cluster has room: say where that stops.
        misfit = _misfit(capacity, gang, memory_mb=capacity.memory_mb)
        text = f"{text} Its largest size never fits the cluster as it is: {misfit}."
    if fit.message != _start_text(shared=False, queued_ahead=0):
        text = f"{text} {fit.message}"  # borrowing, or experiments queued ahead of it
    return text


def _size_text(*, size: Size, by_workers: bool) -> str:
    count, unit = (size.workers, "worker") if by_workers else (size.gpus_per_worker, "GPU")
    per = " per worker" if not by_workers and size.workers > 1 else ""
    return f"{count} {unit}{'' if count == 1 else 's'}{per}"


def _misfit(capacity: Capacity, needs: list[TaskNeed],
            memory_mb: dict[int, int] | None = None) -> str:
    share = next((need for need in needs if need.shared), None)
    if share is not None:
        misfit = _share_misfit(capacity=capacity, needs=needs, share=share,
                               memory_mb=memory_mb or {})
        if misfit:
            return misfit
    gpu_block = max((need.gpus for need in needs), default=0)
    gpus = sum(need.gpus for need in needs)
    # A worker with a share of a GPU holds no CPU slot.
    cpu_needs = [need.cpus for need in needs if not need.gpus and not need.shared]
    cpu_slots = sum(cpu_needs)
    if gpu_block > capacity.largest_gpu_node:
        largest = capacity.largest_gpu_node
        return f"a worker needs {gpu_block} GPUs on one node, the largest has {largest}"
    cpu_block = max(cpu_needs, default=0)
    if cpu_block > capacity.largest_cpu_node:
        largest = capacity.largest_cpu_node
        return f"a task needs {cpu_block} CPU slots on one node, the largest has {largest}"
    if gpus > capacity.gpus_total:
        return f"it needs {gpus} GPUs, the cluster has {capacity.gpus_total}"
    if cpu_slots > capacity.cpu_slots_total:
        return f"it needs {cpu_slots} CPU slots, the cluster has {capacity.cpu_slots_total}"
    return f"its {len(needs)} tasks do not fit the nodes together"


def _share_misfit(*, capacity: Capacity, needs: list[TaskNeed], share: TaskNeed,
                  memory_mb: dict[int, int]) -> str:
    """Why shares of GPUs never fit: no GPU large enough, or too few such shares in all."""
    largest = max(memory_mb.values(), default=0)
    if share.gpu_memory_mb and largest < share.gpu_memory_mb:
        known = f"the largest has {largest} MB" if largest else "no GPU's memory is known"
        return (f"a worker needs {share.gpu_memory_mb} MB of one GPU's memory, {known} "
                "(emulated slots have none)")
    if not capacity.gpus_total:
        return "a worker needs a share of a GPU, and no node has one"
    room = sum(WHOLE_MILLI // milli for kinds in capacity.total.values()
               for device in kinds.get(Device.Kind.GPU, ())
               if (milli := share_of(need=share, memory_mb=memory_mb.get(device, 0))))
    workers = sum(1 for need in needs if need.shared)
    if workers > room:
        amount = (f"{share.gpu_memory_mb} MB of one GPU's memory" if share.gpu_memory_mb
                  else f"{gpus_text(milli=share.gpu_milli)} of a GPU")
        return f"its {workers} workers need {amount} each, the cluster's GPUs hold {room}"
    return ""
