"""Where a gang fits: the scheduler's placement rules, on plain values, with no database.

Each task of a TF cluster (worker i with k accelerators, or a parameter server) needs either k
free GPU devices on one node or, with k = 0, c CPU slots on one node (c is 1 except for a
workspace session that asked for more; a task with GPUs holds no CPU slot). Nodes are chosen
best-fit (the node whose free block is the smallest that still fits) so large blocks stay whole
for large jobs.
The experiments app's scheduling pass (experiments/services/scheduling.py) and the submit
form's outlook (cluster/selectors.py `resources_fit`) both place with these functions.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from tfplatform.cluster.elastic import ElasticRun

KIND_CPU, KIND_GPU = "cpu", "gpu"  # Device.Kind's values
PREEMPTED = "preempted"
NODES_NAMED = 3
WHOLE_MILLI = 1000  # a whole device, in the thousandths an allocation holds

# node id → device kind → free device ids (in device index order)
FreeMap = dict[int, dict[str, list[int]]]
# node id → GPU id → thousandths of it that holders of shares hold (placed shares, no whole)
SharedMap = dict[int, dict[int, int]]
# workers, GPUs per worker, parameter servers, CPU slots, pool, GPU type, share, share memory
Shape = tuple[int, int, int, int, str, str, int, int]


@dataclass(frozen=True)
class TaskNeed:
    task_type: str
    task_index: int
    gpus: int
    cpus: int = 1  # CPU slots on one node, held only when it holds no GPU and no share
    # A share of one GPU instead of whole ones: thousandths of it, or an amount of its memory.
    gpu_milli: int = 0
    gpu_memory_mb: int = 0

    @property
    def shared(self) -> bool:
        return bool(self.gpu_milli or self.gpu_memory_mb)


@dataclass(frozen=True)
class Placement:
    node_id: int
    device_ids: tuple[int, ...]
    need: TaskNeed
    share_milli: int = WHOLE_MILLI  # of its one device, for a need of a share


def share_of(*, need: TaskNeed, memory_mb: int) -> int | None:
    """The thousandths of a GPU with `memory_mb` that the need takes; None when that GPU cannot
    hold it (an amount of memory on a GPU of unknown memory, an emulated slot, or more)."""
    if need.gpu_milli:
        return need.gpu_milli
    if memory_mb <= 0 or need.gpu_memory_mb > memory_mb:
        return None
    return max(1, -(-need.gpu_memory_mb * WHOLE_MILLI // memory_mb))  # rounded up


def gpu_fraction_of(*, milli: int) -> float | None:
    """A share as the API and forms give it (0.25, 0.5); None for none (whole GPUs)."""
    return milli / WHOLE_MILLI if milli else None


def gpus_text(*, milli: int) -> str:
    """Thousandths of GPUs as people write them: 2, 0.5, 1.25."""
    return f"{milli / WHOLE_MILLI:g}"


@dataclass
class Holder:
    """A live trial and the devices it holds on schedulable nodes."""

    trial_id: int
    priority: int
    since: datetime
    stop_reason: str
    devices: list[tuple[int, str, int]] = field(default_factory=list)  # (node, kind, device)
    # Started beyond its team's guarantee: reclaimable by other teams within theirs.
    borrowed: bool = False
    quota: tuple[str, int] = ("user", 0)  # its QuotaKey
    team_name: str = ""
    # An elastic trial: shrunk (restarted smaller) rather than preempted whole, grown on idle
    # devices (cluster/elastic.py).
    elastic: ElasticRun | None = None


QuotaKey = tuple[str, int]


@dataclass
class ClusterView:
    """What one pass knows about the cluster, updated in memory as it decides."""

    hostnames: dict[int, str]
    free: FreeMap  # free and not reserved: what may be allocated now (whole, unshared)
    idle: FreeMap  # free, reserved or not
    holders: dict[int, Holder]
    device_holder: dict[int, Holder]
    quota_gpus: dict[QuotaKey, int]  # GPUs held per team, and per user without one
    # GPUs holders of shares hold, and each GPU's memory (MB; 0 unknown), for shares.
    shared: SharedMap = field(default_factory=dict)
    sharers: dict[int, set[int]] = field(default_factory=dict)  # shared GPU → its holders' trials
    memory_mb: dict[int, int] = field(default_factory=dict)
    # Each schedulable node's pool and GPU type (cluster/pools.py).
    node_pools: dict[int, str] = field(default_factory=dict)
    node_gpu_types: dict[int, str] = field(default_factory=dict)
    # CPU slots the same way; and per user, the training experiments holding devices.
    quota_cpus: dict[QuotaKey, int] = field(default_factory=lambda: defaultdict(int))
    running: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    # Per quota, the GPU thousandths and CPU slots its borrowed trials hold (who lends next).
    borrowed: dict[QuotaKey, tuple[int, int]] = field(default_factory=dict)
    reserved: set[int] = field(default_factory=set)
    disk_full: dict[str, int] = field(default_factory=dict)  # online nodes left out: free bytes


def quota_key(*, team_id: int | None, owner_id: int) -> QuotaKey:
    # A user without a team has a quota of their own (PLATFORM_USER_GPU_QUOTA).
    return ("team", team_id) if team_id is not None else ("user", owner_id)


def task_needs(
    *, workers: int, gpus_per_worker: int, parameter_servers: int, cpu_slots_per_worker: int = 1,
    gpu_milli: int = 0, gpu_memory_mb: int = 0,
) -> list[TaskNeed]:
    """A gang's tasks, the largest first (they are the hardest to place). A worker without
    GPUs holds `cpu_slots_per_worker` CPU slots, or a share of one GPU (`gpu_milli`
    thousandths, or `gpu_memory_mb` of its memory) and no CPU slot; a parameter server holds one
    CPU slot."""
    needs = [TaskNeed("worker", i, gpus_per_worker, max(1, cpu_slots_per_worker),
                      gpu_milli=gpu_milli, gpu_memory_mb=gpu_memory_mb)
             for i in range(workers)]
    needs += [TaskNeed("ps", i, 0) for i in range(parameter_servers)]
    return sorted(needs, key=lambda need: (-need.gpus, not need.shared, -need.cpus))


def needs_held(*, needs: list[TaskNeed]) -> tuple[int, int]:
    """The thousandths of GPUs and the CPU slots a gang holds while it runs (what quotas count).
    A share asked for as memory counts once placed (`placements_gpu_milli`): its thousandths
    depend on the GPU it gets."""
    return (sum(need.gpus * WHOLE_MILLI + need.gpu_milli for need in needs),
            sum(need.cpus for need in needs if not need.gpus and not need.shared))


def placements_gpu_milli(*, placements: list[Placement]) -> int:
    return sum(p.share_milli if p.need.shared else len(p.device_ids) * WHOLE_MILLI
               for p in placements if p.need.gpus or p.need.shared)


def need_kind(*, need: TaskNeed) -> tuple[str, int]:
    if need.shared:
        return KIND_GPU, 1
    return (KIND_GPU, need.gpus) if need.gpus else (KIND_CPU, need.cpus)


def gang_place(
    *, needs: list[TaskNeed], free: FreeMap, nodes: frozenset[int] | None = None,
    shared: SharedMap | None = None, memory_mb: dict[int, int] | None = None,
) -> list[Placement] | None:
    """Place every task or none; `free` maps node id → device kind → free device ids; `nodes`:
    only these (a request for a pool or a GPU type, cluster/pools.py). A share of a GPU goes to
    the shared GPU (`shared`) it fills best, else takes a free one whole for shares."""
    # Counts of what this gang already took, instead of copying the map: called ~1,000
    # times a pass, so it stays O(tasks × nodes).
    taken: dict[tuple[int, str], int] = defaultdict(int)
    shares = _Shares(free=free, shared=shared or {}, memory_mb=memory_mb or {}, nodes=nodes)
    placements = []
    for need in needs:
        if need.shared:
            spot = shares.place(need=need, taken=taken)
            if spot is None:
                return None
            placements.append(spot)
            continue
        kind, count = need_kind(need=need)
        best: tuple[int, int] | None = None
        for node, kinds in free.items():
            if nodes is not None and node not in nodes:
                continue
            left = len(kinds.get(kind, ())) - taken[node, kind]
            if left >= count and (best is None or (left, node) < best):
                best = (left, node)
        if best is None:
            return None
        node = best[1]
        start = taken[node, kind]
        taken[node, kind] += count
        device_ids = tuple(free[node][kind][start : start + count])
        placements.append(Placement(node_id=node, device_ids=device_ids, need=need))
    return placements


def pending_reason(
    *, needs: list[TaskNeed], free: FreeMap, nodes: frozenset[int] | None = None, where: str = ""
) -> str:
    """Why the gang cannot start on `free`; `where` names the pool or GPU type `nodes` are."""
    if nodes is not None:
        free = {node: kinds for node, kinds in free.items() if node in nodes}
    reason = _free_reason(needs=needs, free=free)
    if not where:
        return reason
    if not free:
        return f"No worker node of {where} is online and accepting work."
    return f"{reason.removesuffix('.')} ({where})."


def share_pending_reason(*, needs: list[TaskNeed], where: str = "") -> str:
    """Why a gang of shares of GPUs waits: no GPU with that much room that is not held whole."""
    need = next(need for need in needs if need.shared)
    amount = (f"{need.gpu_memory_mb} MB of one GPU's memory" if need.gpu_memory_mb
              else f"{gpus_text(milli=need.gpu_milli)} of a GPU")
    within = f" of {where}" if where else ""
    return (f"Needs {amount} for each worker; no GPU{within} has that much room free (a GPU "
            "held whole is not shared).")


def _free_reason(*, needs: list[TaskNeed], free: FreeMap) -> str:
    gpu_need = max((need.gpus for need in needs), default=0)
    if not free:
        return "No worker node is online and accepting work."
    if gpu_need:
        largest = max((len(kinds.get(KIND_GPU, [])) for kinds in free.values()), default=0)
        return f"Needs {gpu_need} GPUs on one node; the largest free block is {largest}."
    cpu_need = max((need.cpus for need in needs), default=1)
    if cpu_need > 1:
        largest = max((len(kinds.get(KIND_CPU, [])) for kinds in free.values()), default=0)
        return f"Needs {cpu_need} CPU slots on one node; the largest free block is {largest}."
    return "Waiting for a free CPU slot on a worker node."


def disk_full_text(*, disk_full: dict[str, int], min_free_bytes: int) -> str:
    """Why nodes that are online take no trial: their work disk is (nearly) full."""
    named = sorted(disk_full.items())[:NODES_NAMED]
    nodes = ", ".join(f"{host} ({free // 2**20} MB free)" for host, free in named)
    more = f" and {len(disk_full) - len(named)} more" if len(disk_full) > len(named) else ""
    return (f"Out of disk space for trials on {nodes}{more}: new trials need "
            f"{min_free_bytes // 2**20} MB free; an operator must free space there.")


def holder_unreserved(*, view: ClusterView, holder: Holder, kinds: set[str]) -> int:
    return sum(1 for _, k, device in holder.devices if k in kinds and device not in view.reserved)


def free_map_with(*, view: ClusterView, holders: list[Holder]) -> FreeMap:
    """The unreserved free devices plus the unreserved devices these holders would release: a
    shared GPU only when every one of its sharers is among them."""
    result: FreeMap = {
        node: {k: list(ids) for k, ids in kinds.items()} for node, kinds in view.free.items()
    }
    chosen = {holder.trial_id for holder in holders}
    released: set[int] = set()
    for holder in holders:
        for node, kind, device in holder.devices:
            if device in view.reserved or device in released:
                continue
            sharers = view.sharers.get(device)
            if sharers is not None and not sharers <= chosen:
                continue
            released.add(device)
            result[node].setdefault(kind, []).append(device)
    return result


def holders_fewest(
    *, view: ClusterView, needs: list[TaskNeed], base: list[Holder], ordered: list[Holder],
    nodes: frozenset[int] | None = None,
) -> tuple[list[Placement], list[Holder]] | None:
    """The shortest prefix of `ordered` that, with `base`, fits the gang; then pruned."""
    placements = gang_place(needs=needs, free=free_map_with(view=view, holders=base + ordered),
                            nodes=nodes)
    if not ordered or placements is None:
        return None
    # Fit only grows with the devices added (tasks of one kind have one size: several CPU
    # slots only for a workspace's single worker), so bisect.
    low, high = 0, len(ordered)
    while low < high:
        middle = (low + high) // 2
        found = gang_place(
            needs=needs, free=free_map_with(view=view, holders=base + ordered[:middle]),
            nodes=nodes,
        )
        if found is None:
            low = middle + 1
        else:
            high, placements = middle, found
    chosen = ordered[:high]
    # Drop any member the others can do without, latest in the order (least wanted) first.
    for holder in reversed(ordered[:high]):
        rest = [h for h in chosen if h is not holder]
        found = gang_place(needs=needs, free=free_map_with(view=view, holders=base + rest),
                           nodes=nodes)
        if found is not None:
            chosen, placements = rest, found
    return placements, chosen


def backfill_plan(
    *, view: ClusterView, needs: list[TaskNeed], nodes: frozenset[int] | None = None
) -> list[Placement] | None:
    """Where the head will start: the devices freed first, stopping trials before the oldest."""
    kinds = {need_kind(need=need)[0] for need in needs}
    ordered = sorted(
        (h for h in view.holders.values() if holder_unreserved(view=view, holder=h, kinds=kinds)),
        key=lambda h: (not h.stop_reason, h.since, h.trial_id),
    )
    found = holders_fewest(view=view, needs=needs, base=[], ordered=ordered, nodes=nodes)
    return found[0] if found is not None else None


class _Shares:
    """Where one gang's shares of GPUs go: best fit among shared GPUs (the fullest that still
    holds it), else a free GPU taken whole for shares, on the node with the fewest free GPUs
    (large blocks stay whole, as for whole GPUs). A GPU shared never holds a whole-GPU task."""

    def __init__(self, *, free: FreeMap, shared: SharedMap, memory_mb: dict[int, int],
                 nodes: frozenset[int] | None) -> None:
        self.free, self.shared, self.memory_mb, self.nodes = free, shared, memory_mb, nodes
        self.added: dict[int, int] = defaultdict(int)  # device → thousandths this gang put on it
        self.opened: dict[int, int] = {}  # device → node, free GPUs this gang began to share

    def _allowed(self, node: int) -> bool:
        return self.nodes is None or node in self.nodes

    def place(self, *, need: TaskNeed, taken: dict[tuple[int, str], int]) -> Placement | None:
        best: tuple[int, int, int, int] | None = None  # (room left, node, device, share)
        candidates = [(node, device, used) for node, devices in self.shared.items()
                      if self._allowed(node) for device, used in devices.items()]
        candidates += [(node, device, 0) for device, node in self.opened.items()]
        for node, device, used in candidates:
            share = share_of(need=need, memory_mb=self.memory_mb.get(device, 0))
            if share is None:
                continue
            left = WHOLE_MILLI - used - self.added[device] - share
            if left >= 0 and (best is None or (left, node, device) < best[:3]):
                best = (left, node, device, share)
        if best is None:
            best = self._open(need=need, taken=taken)
        if best is None:
            return None
        _, node, device, share = best
        self.added[device] += share
        return Placement(node_id=node, device_ids=(device,), need=need, share_milli=share)

    def _open(self, *, need: TaskNeed,
              taken: dict[tuple[int, str], int]) -> tuple[int, int, int, int] | None:
        """The next free GPU of the node with the fewest, taken whole for shares."""
        best: tuple[int, int, int, int] | None = None  # (free GPUs left, node, device, share)
        for node, kinds in self.free.items():
            gpus = kinds.get(KIND_GPU, [])
            start = taken[node, KIND_GPU]
            if not self._allowed(node) or start >= len(gpus):
                continue
            share = share_of(need=need, memory_mb=self.memory_mb.get(gpus[start], 0))
            if share is not None and (best is None or (len(gpus) - start, node) < best[:2]):
                best = (len(gpus) - start, node, gpus[start], share)
        if best is not None:
            taken[best[1], KIND_GPU] += 1
            self.opened[best[2]] = best[1]
        return best


def view_take(*, view: ClusterView, placements: list[Placement]) -> None:
    for placement in placements:
        if placement.need.shared:
            _view_share(view=view, placement=placement)
            continue
        taken = set(placement.device_ids)
        for pool in (view.free, view.idle):
            kinds = pool[placement.node_id]
            for kind in kinds:
                kinds[kind] = [d for d in kinds[kind] if d not in taken]


def _view_share(*, view: ClusterView, placement: Placement) -> None:
    (device,) = placement.device_ids
    node = placement.node_id
    for pool in (view.free, view.idle):  # a GPU first shared is no longer free whole
        gpus = pool[node].get(KIND_GPU)
        if gpus and device in gpus:
            pool[node][KIND_GPU] = [d for d in gpus if d != device]
    devices = view.shared.setdefault(node, {})
    devices[device] = devices.get(device, 0) + placement.share_milli


def view_reserve(*, view: ClusterView, placements: list[Placement]) -> None:
    for placement in placements:
        view.reserved.update(placement.device_ids)
        taken = set(placement.device_ids)
        kinds = view.free[placement.node_id]
        for kind in kinds:
            kinds[kind] = [d for d in kinds[kind] if d not in taken]


def _holders_of(*, view: ClusterView, placements: list[Placement]) -> list[Holder]:
    found: dict[int, Holder] = {}
    for placement in placements:
        for device in placement.device_ids:
            if (holder := view.device_holder.get(device)) is not None:
                found[holder.trial_id] = holder
            for trial in view.sharers.get(device, ()):
                found[trial] = view.holders[trial]
    return list(found.values())


def _nodes_text(*, view: ClusterView, placements: list[Placement]) -> str:
    nodes = sorted({view.hostnames[p.node_id] for p in placements})
    more = f" and {len(nodes) - NODES_NAMED} more" if len(nodes) > NODES_NAMED else ""
    return ", ".join(nodes[:NODES_NAMED]) + more


def _plural(*, count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def waiting_text(*, view: ClusterView, placements: list[Placement]) -> str:
    holders = _holders_of(view=view, placements=placements)
    preempted = sum(1 for h in holders if h.stop_reason == PREEMPTED)
    nodes = _nodes_text(view=view, placements=placements)
    reclaimed = [h for h in holders if h.borrowed and h.stop_reason == PREEMPTED]
    if reclaimed:
        gpus = sum(1 for h in reclaimed for _, kind, _ in h.devices if kind == KIND_GPU)
        teams = ", ".join(sorted({h.team_name or "a user without a team" for h in reclaimed}))
        what = _plural(count=gpus, word="GPU") if gpus else _plural(
            count=sum(len(h.devices) for h in reclaimed), word="CPU slot")
        return (f"Waiting to reclaim {what} borrowed by {teams}; devices on {nodes} are "
                "reserved for it.")
    if preempted:
        trials = _plural(count=preempted, word="lower-priority trial")
        return f"Waiting for devices: preempting {trials}; devices on {nodes} are reserved for it."
    trials = _plural(count=len(holders), word="stopping trial")
    return f"Waiting for {trials} to release devices; devices on {nodes} are reserved for it."


def reservation_text(*, view: ClusterView, placements: list[Placement]) -> str:
    trials = _plural(count=len(_holders_of(view=view, placements=placements)), word="running trial")
    nodes = _nodes_text(view=view, placements=placements)
    return (
        f"It has a reservation on {nodes} (waiting for {trials} to end); "
        "smaller jobs may start meanwhile only on other devices."
    )
