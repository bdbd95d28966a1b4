"""One scheduling pass: place queued experiments on free devices, all of a gang or nothing
(placement rules: cluster/placement.py).

Queued experiments are considered by priority, then age. One that cannot start now:

1. waits for trials that are already stopping (preempted, canceled) if their devices would
   let it start;
2. otherwise preempts: if strictly-lower-priority live trials hold what it lacks, the fewest
   of the lowest priority are asked to stop (reason "preempted"; an elastic trial above its
   smallest size goes first and is "resized": it restarts smaller, cluster/elastic.py; a shared
   GPU counts only when all its sharers stop). It allocates only after they released their
   devices, on a later pass;
3. otherwise, if it is the first such experiment (the head of the queue), it gets a backfill
   reservation: the devices it will get once the live trials expected to end first (stopping
   ones, then the oldest) let go.

In all three cases the devices it is waiting for are reserved for it, and experiments after it
start only on devices outside every reservation: backfilling never delays the head, and
nobody slips into devices freed by a preemption. Reservations last one pass and are rebuilt
from the database on the next, so none can go stale. A quota-blocked experiment neither
reserves nor preempts.

An elastic experiment starts at the largest of its sizes that fits now, else waits as its
smallest; after the queue, elastic trials below their largest size grow onto idle devices when
nothing waits for devices (grow).

A pass reads the cluster in a handful of queries and decides in memory; only the decisions
are written, set-based, at its end: one conditional UPDATE … RETURNING admits the experiments it
started (one canceled meanwhile is left out: a cancel never waits for the pass, which holds no
row until then), one insert makes their trials and one their allocations; stop requests; and
the pending reasons that changed. Reasons hold no queue position (readers compute it:
selectors.scheduling), so a pass rewrites only the reasons whose cause changed. After the commit
each trial goes to the node queues the pass's own view named, and one UPDATE marks them sent.
"""

import logging
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from django.conf import settings
from django.db import DatabaseError, OperationalError, connection, transaction
from django.utils import timezone
from psycopg.errors import SerializationFailure

from tfplatform.accounts.models import User
from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import audit_record
from tfplatform.cluster import selectors
from tfplatform.cluster.dispatch import dispatch_producer, trial_dispatch, trial_dispatch_to
from tfplatform.cluster.elastic import RESIZED, ElasticRun, Size, elastic_sizes
from tfplatform.cluster.models import Allocation, Device
from tfplatform.cluster.placement import (
    KIND_CPU,
    KIND_GPU,
    PREEMPTED,
    WHOLE_MILLI,
    ClusterView,
    FreeMap,
    Holder,
    Placement,
    QuotaKey,
    Shape,
    SharedMap,
    TaskNeed,
    backfill_plan,
    disk_full_text,
    free_map_with,
    gang_place,
    holder_unreserved,
    holders_fewest,
    need_kind,
    needs_held,
    pending_reason,
    placements_gpu_milli,
    quota_key,
    reservation_text,
    share_pending_reason,
    task_needs,
    view_reserve,
    view_take,
    waiting_text,
)
from tfplatform.cluster.pools import nodes_eligible, where_text
from tfplatform.cluster.services import allocations_create_many
from tfplatform.experiments.models import Experiment, Trial
from tfplatform.experiments.selectors.scheduling import (
    QueuedExperiment,
    experiments_for_pass,
    experiments_queued_for_pass,
)
from tfplatform.experiments.selectors.trials import trials_dispatch_overdue_ids
from tfplatform.experiments.services.quotas import borrowing_text, lending_order, quota_state
from tfplatform.experiments.services.transitions import experiments_schedule
from tfplatform.experiments.services.trials import (
    TRIAL_ACTIVE_STATES,
    trial_mark_dispatched,
    trial_request_stop,
    trials_create,
    trials_mark_dispatched,
)

logger = logging.getLogger(__name__)
ADVISORY_LOCK_KEY = 7_305_001
REASON_MAX_CHARS = 300  # Experiment.pending_reason's max_length
PASS_ATTEMPTS = 5


def _sizes(*, experiment: QueuedExperiment) -> list[Size]:
    """The sizes it may start at, the largest first (one unless elastic)."""
    return elastic_sizes(workers=experiment.workers, gpus_per_worker=experiment.gpus_per_worker,
                         workers_min=experiment.workers_min,
                         gpus_per_worker_min=experiment.gpus_per_worker_min)


def _needs(*, experiment: QueuedExperiment, size: Size | None = None) -> list[TaskNeed]:
    size = size or _sizes(experiment=experiment)[-1]
    return task_needs(
        workers=size.workers,
        gpus_per_worker=size.gpus_per_worker,
        parameter_servers=experiment.parameter_servers,
        cpu_slots_per_worker=experiment.cpu_slots_per_worker,
        gpu_milli=experiment.gpu_milli,
        gpu_memory_mb=experiment.gpu_memory_mb,
    )


def _shape(*, experiment: QueuedExperiment, size: Size | None = None) -> Shape:
    # The CPU slots too: a 4-slot session that cannot start says nothing of a 1-slot one; nor
    # does one limited to a pool or a GPU type of one that is not.
    size = size or _sizes(experiment=experiment)[-1]
    return (size.workers, size.gpus_per_worker, experiment.parameter_servers,
            experiment.cpu_slots_per_worker, experiment.pool, experiment.gpu_type,
            experiment.gpu_milli, experiment.gpu_memory_mb)


def scheduler_pass() -> int:
    """Run one pass; returns how many experiments were scheduled."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        # SQLite's transactions are serializable already; inside a caller's transaction the
        # snapshot is the caller's to choose.
        with transaction.atomic():
            _serialize_schedulers()
            return _pass_decide()
    # One snapshot for every read of the pass (REPEATABLE READ), taken once the other
    # schedulers are done: under READ COMMITTED each query saw the database as it stood then,
    # so a node cordoned between the node query and the queue query still got an experiment
    # submitted after the cordon, and an elastic run could restart smaller than it could.
    with _schedulers_serialized():
        attempt = 1
        while True:
            try:
                with transaction.atomic():
                    with connection.cursor() as cursor:
                        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    return _pass_decide()
            except OperationalError as error:
                # A row the pass writes (an experiment canceled, a trial's state) changed
                # since its snapshot: decide again on a fresh one.
                if attempt == PASS_ATTEMPTS or not isinstance(error.__cause__,
                                                              SerializationFailure):
                    raise
                logger.info("Scheduling pass %d met a concurrent update; deciding again",
                            attempt)
                attempt += 1


def _pass_decide() -> int:
    view, queues = _cluster_view()
    decider = _Pass(view=view)
    for experiment in experiments_queued_for_pass():
        decider.consider(experiment=experiment)
    decider.lend()
    decider.grow()
    scheduled = _starts_write(starts=decider.starts, borrowed=decider.borrowed,
                              sizes=decider.sizes)
    if decider.reasons_changed:
        _pending_reasons_save(experiments=decider.reasons_changed)
    if scheduled:
        # Node queues from the pass's own view: no reads per trial after the commit.
        messages = {trial_id: [(node, queues[node]) for node in sorted(
            {placement.node_id for placement in placements})]
            for trial_id, placements in scheduled.items()}
        transaction.on_commit(partial(trials_dispatch_send, messages=messages))
    return len(scheduled)


def trials_dispatch_send(*, messages: dict[int, list[tuple[int, str]]]) -> int:
    """A pass's trials to their nodes, then one write marks those sent; a trial the broker
    refused is sent again by the scheduler's loop (`trials_dispatch_overdue`)."""
    sent = []
    try:
        with dispatch_producer() as producer:
            for trial_id, nodes in messages.items():
                trial_dispatch_to(trial_id=trial_id, nodes=nodes, producer=producer)
                sent.append(trial_id)
    except Exception:  # kombu's and redis-py's connection errors share no base class
        logger.warning("Could not dispatch %d trial(s); will retry", len(messages) - len(sent),
                       exc_info=True)
    trials_mark_dispatched(trial_ids=sent)
    return len(sent)


def _starts_write(
    *, starts: list[tuple[QueuedExperiment, list[Placement]]], borrowed: set[int],
    sizes: dict[int, tuple[int, int]],
) -> dict[int, list[Placement]]:
    """The pass's admissions, set-based: one conditional UPDATE … RETURNING, one insert of
    trials, one of allocations. An experiment canceled while the pass decided keeps its
    state, gets no trial, and what the pass placed it on stays free."""
    if not starts:
        return {}
    admitted = experiments_schedule(experiment_ids=[e.pk for e, _ in starts])
    for experiment, _ in starts:
        if experiment.pk not in admitted:
            logger.info("Experiment %s left the queue while being scheduled", experiment.pk)
    kept = [(e, placements) for e, placements in starts if e.pk in admitted]
    trials = trials_create(experiment_ids=[e.pk for e, _ in kept],
                           borrowed=frozenset(borrowed), sizes=sizes)
    placed = {trials[e.pk]: placements for e, placements in kept}
    allocations_create_many(placements_by_trial=placed)
    return placed


def trial_dispatch_send(*, trial_id: int) -> bool:
    """Send the trial's messages to its nodes; False when the broker refused them (the
    scheduler's loop sends them again, `trials_dispatch_overdue`)."""
    try:
        trial_dispatch(trial_id=trial_id)
    except Exception:  # kombu's and redis-py's connection errors share no base class
        logger.warning("Could not dispatch trial %s; will retry", trial_id, exc_info=True)
        return False
    trial_mark_dispatched(trial_id=trial_id)
    return True


def trials_dispatch_overdue() -> int:
    """Send again what no node took up: a trial never dispatched (the broker was away when it
    was scheduled), or one whose parts have not started within DISPATCH_RETRY_SECONDS of its
    last dispatch (a broker that restarted without persistence lost the messages). A part that
    did start drops the duplicate (allocations_claim_part), so sending again is safe."""
    resent = 0
    for trial_id in trials_dispatch_overdue_ids():
        resent += trial_dispatch_send(trial_id=trial_id)
    return resent


def _serialize_schedulers() -> None:
    # Two schedulers never interleave: the second waits for the first's transaction. SQLite
    # needs nothing here: its transactions begin IMMEDIATE, taking the single write lock.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ADVISORY_LOCK_KEY])


@contextmanager
def _schedulers_serialized() -> Iterator[None]:
    """The same lock held by the session, outside the pass's transaction: a REPEATABLE READ
    snapshot is taken by the transaction's first query, which must come after the wait, or
    the second scheduler would decide on what the first had not yet committed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
    try:
        yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_LOCK_KEY])
        except DatabaseError:
            # The connection is gone, and the lock went with its session.
            logger.warning("Could not release the scheduling lock", exc_info=True)


def _cluster_view() -> tuple[ClusterView, dict[int, str]]:
    """Schedulable nodes, their devices, and who holds what: three queries for the pass; and
    each schedulable node's queue, for the dispatch of what it starts.

    A node under disk pressure (selectors.nodes_schedulable) takes nothing new."""
    # Online nodes in one query: those under disk pressure only explain why the queue waits.
    minimum = selectors.disk_free_min_bytes()
    hostnames, disk_full, queues = {}, {}, {}
    node_pools, node_gpu_types = {}, {}
    online = selectors.nodes_online().values_list(
        "pk", "hostname", "work_disk_free_bytes", "queue", "pool", "gpu_type")
    for node, hostname, disk_free, queue, pool, gpu_type in online:
        if disk_free is not None and disk_free < minimum:
            disk_full[hostname] = disk_free
        else:
            hostnames[node], queues[node] = hostname, queue
            node_pools[node], node_gpu_types[node] = pool, gpu_type
    holders: dict[int, Holder] = {}
    device_holder: dict[int, Holder] = {}
    quota_gpus: dict[QuotaKey, int] = defaultdict(int)
    quota_cpus: dict[QuotaKey, int] = defaultdict(int)
    running_trials: dict[int, set[int]] = defaultdict(set)
    live = Allocation.objects.of_trials().filter(released_at__isnull=True).values_list(
        "device_id",
        "node_id",
        "device__kind",
        "holder_id",
        "trial__state",
        "trial__stop_reason",
        "trial__experiment__priority",
        "trial__experiment__team_id",
        "trial__experiment__owner_id",
        "trial__experiment__kind",
        "share_milli",
        "trial__borrowed",
        "trial__experiment__team__name",
        "trial__experiment__team__gpu_quota",
        "trial__experiment__team__cpu_slot_quota",
        "created_at",
        "trial__experiment_id",
        "trial__workers",
        "trial__gpus_per_worker",
        "trial__experiment__workers",
        "trial__experiment__gpus_per_worker",
        "trial__experiment__workers_min",
        "trial__experiment__gpus_per_worker_min",
        "trial__experiment__pool",
        "trial__experiment__gpu_type",
    )
    shared: SharedMap = {}
    sharers: dict[int, set[int]] = {}
    borrowed: dict[QuotaKey, tuple[int, int]] = {}
    guarantees: dict[QuotaKey, tuple[int, int]] = {}
    for (device, node, kind, trial, state, stop, priority, team, owner, job, share, lent,
         team_name, gpu_quota, cpu_quota, since, *elastic_columns) in live:
        # Quotas count what is held anywhere, lost nodes included; GPUs in thousandths.
        key = quota_key(team_id=team, owner_id=owner)
        gpu = kind == Device.Kind.GPU
        if gpu:
            quota_gpus[key] += share
        else:
            quota_cpus[key] += 1
        if lent:
            gpus, cpus = borrowed.get(key, (0, 0))
            borrowed[key] = (gpus + share, cpus) if gpu else (gpus, cpus + 1)
            guarantees[key] = (gpu_quota * WHOLE_MILLI, cpu_quota)
        if job == Experiment.Kind.TRAINING:
            running_trials[owner].add(trial)
        if device is None or node not in hostnames:
            continue
        if share < WHOLE_MILLI:
            # A share's GPU is freed only when all its sharers end (placement.free_map_with):
            # whole-GPU work may preempt them all; shares themselves wait without preempting.
            shared.setdefault(node, {})[device] = shared.get(node, {}).get(device, 0) + share
            sharers.setdefault(device, set()).add(trial)
        # An ended trial whose devices are not yet released is as good as stopping.
        stop = stop or ("" if state in TRIAL_ACTIVE_STATES else "ended")
        holder = holders.get(trial) or holders.setdefault(
            trial, Holder(trial_id=trial, priority=priority, since=since, stop_reason=stop,
                          borrowed=lent, quota=key, team_name=team_name or "",
                          elastic=_elastic_run(owner=owner, columns=elastic_columns)),
        )
        holder.since = min(holder.since, since)
        holder.devices.append((node, kind, device))
        if share >= WHOLE_MILLI:
            device_holder[device] = holder
    # A trial started on borrowed devices stays reclaimable only while its team holds more than
    # its guarantee: once the team's other trials ended, what it holds is its own.
    for holder in holders.values():
        if holder.borrowed:
            gpu_guarantee, cpu_guarantee = guarantees[holder.quota]
            holder.borrowed = (quota_gpus[holder.quota] > gpu_guarantee
                               or quota_cpus[holder.quota] > cpu_guarantee)
    free: FreeMap = {node: defaultdict(list) for node in hostnames}
    idle: FreeMap = {node: defaultdict(list) for node in hostnames}
    devices = Device.objects.filter(node_id__in=list(hostnames)).order_by(
        "node_id", "kind", "index"
    )
    memory_mb: dict[int, int] = {}
    shared_ids = {device for devices in shared.values() for device in devices}
    for device, node, kind, memory in devices.values_list("pk", "node_id", "kind",
                                                          "memory_bytes"):
        if kind == Device.Kind.GPU:
            memory_mb[device] = memory // 2**20
        if device not in device_holder and device not in shared_ids:
            free[node][kind].append(device)
            idle[node][kind].append(device)
    return ClusterView(
        hostnames=hostnames,
        free=free,
        idle=idle,
        holders=holders,
        device_holder=device_holder,
        quota_gpus=quota_gpus,
        quota_cpus=quota_cpus,
        shared=shared,
        sharers=sharers,
        memory_mb=memory_mb,
        node_pools=node_pools,
        node_gpu_types=node_gpu_types,
        running=defaultdict(int, {owner: len(t) for owner, t in running_trials.items()}),
        borrowed=borrowed,
        disk_full=disk_full,
    ), queues


def _elastic_run(*, owner: int, columns: list[Any]) -> ElasticRun | None:
    (experiment, workers, gpus, largest_workers, largest_gpus, workers_min, gpus_min, pool,
     gpu_type) = columns
    if not (workers_min or gpus_min):
        return None
    sizes = elastic_sizes(workers=largest_workers, gpus_per_worker=largest_gpus,
                          workers_min=workers_min, gpus_per_worker_min=gpus_min)
    size = Size(largest_workers if workers is None else workers,
                largest_gpus if gpus is None else gpus)
    return ElasticRun(experiment_id=experiment, owner_id=owner, size=size, sizes=tuple(sizes),
                      pool=pool, gpu_type=gpu_type)


class _Pass:
    """The decisions of one pass, made in queue order against one ClusterView."""

    def __init__(self, *, view: ClusterView) -> None:
        self.view = view
        self.starts: list[tuple[QueuedExperiment, list[Placement]]] = []
        self.reasons_changed: list[QueuedExperiment] = []
        # The pools (and GPU types) whose head has its backfill reservation.
        self.heads_reserved: set[tuple[str, str]] = set()
        self.eligible: dict[tuple[str, str], frozenset[int] | None] = {}
        # Within a pass capacity only shrinks, so a shape that could not start cannot later;
        # one that could not wait (even by preempting) cannot at an equal or lower priority.
        self.cannot_start: set[Shape] = set()
        # By quota too: a team within its guarantee may reclaim what another team borrowed.
        self.cannot_wait: dict[tuple[Shape, QuotaKey], int] = {}
        # Those beyond their team's guarantee, placed after the queue (lend); those it started.
        self.borrowers: list[QueuedExperiment] = []
        self.borrowed: set[int] = set()
        # The size each elastic experiment it started starts at (workers, GPUs per worker).
        self.sizes: dict[int, tuple[int, int]] = {}
        # Whether an experiment was left waiting for devices (not for its quota): then no
        # elastic trial grows.
        self.waiting = False

    def _nodes(self, *, experiment: QueuedExperiment | ElasticRun) -> frozenset[int] | None:
        """The nodes it may run on; None: any (it asked for no pool and no GPU type)."""
        key = (experiment.pool, experiment.gpu_type)
        if key not in self.eligible:
            self.eligible[key] = nodes_eligible(
                pool=experiment.pool, gpu_type=experiment.gpu_type,
                node_pools=self.view.node_pools, node_gpu_types=self.view.node_gpu_types)
        return self.eligible[key]

    def consider(self, *, experiment: QueuedExperiment) -> None:
        if self._start_larger(experiment=experiment, borrowing=False):
            return
        needs = _needs(experiment=experiment)
        state = quota_state(experiment=experiment, needs=needs, view=self.view)
        if state.borrowing:
            self.borrowers.append(experiment)  # after everything within its guarantee
            return
        reason = state.reason
        if not reason:
            placements = self._place_now(experiment=experiment, needs=needs)
            if placements is not None and experiment.gpu_memory_mb:
                # A share asked for as memory is so many thousandths of the GPU it got.
                reason = quota_state(experiment=experiment, needs=needs, view=self.view,
                                     gpu_milli=placements_gpu_milli(placements=placements)).reason
            if placements is not None and not reason:
                self._start(experiment=experiment, placements=placements)
                return
            reason = reason or self._wait(experiment=experiment, needs=needs)
        self._reason_set(experiment=experiment, reason=reason)

    def _start_larger(self, *, experiment: QueuedExperiment, borrowing: bool) -> bool:
        """An elastic experiment at the largest of its sizes above the smallest that starts
        now within its quota (`borrowing`: or beyond its guarantee); False when none does
        (its smallest then takes the way any experiment takes)."""
        for size in _sizes(experiment=experiment)[:-1]:
            needs = _needs(experiment=experiment, size=size)
            state = quota_state(experiment=experiment, needs=needs, view=self.view)
            if state.reason or (state.borrowing and not borrowing):
                continue
            placements = self._place_now(experiment=experiment, needs=needs, size=size)
            if placements is not None:
                self._start(experiment=experiment, placements=placements,
                            borrowed=state.borrowing, size=size)
                return True
        return False

    def _reason_set(self, *, experiment: QueuedExperiment, reason: str) -> None:
        # No queue position in it: positions move with every start, and would rewrite every
        # queued row each pass (readers add it: selectors.scheduling.pending_reason_shown).
        text = reason[:REASON_MAX_CHARS]
        if experiment.pending_reason != text:
            experiment.pending_reason = text
            self.reasons_changed.append(experiment)

    def lend(self) -> None:
        """Borrowers, once everything within its guarantee had its turn: on idle devices
        only (what no reservation holds), the team borrowing least for its weight first."""
        weights = {quota_key(team_id=e.team_id, owner_id=e.owner_id): e.team_weight or 1
                   for e in self.borrowers}
        for experiment in lending_order(borrowers=self.borrowers, view=self.view,
                                        weights=weights):
            if self._start_larger(experiment=experiment, borrowing=True):
                continue
            needs = _needs(experiment=experiment)
            state = quota_state(experiment=experiment, needs=needs, view=self.view)
            reason = state.reason
            if not reason:
                placements = self._place_now(experiment=experiment, needs=needs)
                if placements is not None:
                    self._start(experiment=experiment, placements=placements,
                                borrowed=state.borrowing)
                    continue
                base = pending_reason(
                    needs=needs, free=self.view.free, nodes=self._nodes(experiment=experiment),
                    where=where_text(pool=experiment.pool, gpu_type=experiment.gpu_type))
                reason = borrowing_text(experiment=experiment, base=base)
                self.waiting = True
            self._reason_set(experiment=experiment, reason=reason)

    def grow(self) -> None:
        """Elastic trials below their largest size onto idle devices, when nothing that could
        use them waits and they have run PLATFORM_ELASTIC_GROW_AFTER_SECONDS: each is stopped
        to restart larger, and what it will take is reserved for the rest of the pass."""
        if self.waiting:
            return
        after = settings.PLATFORM.elastic_grow_after_seconds
        now = timezone.now()
        growing = [h for h in self.view.holders.values()
                   if h.elastic is not None and h.elastic.larger and not h.stop_reason
                   and (now - h.since).total_seconds() >= after]
        if not growing:
            return
        rows = {e.pk: e for e in experiments_for_pass(
            experiment_ids=[h.elastic.experiment_id for h in growing if h.elastic])}
        for holder in sorted(growing, key=lambda h: (-h.priority, h.since)):
            assert holder.elastic is not None
            experiment = rows.get(holder.elastic.experiment_id)
            grown = experiment and self._grown(holder=holder, experiment=experiment)
            if not grown:
                continue
            size, placements = grown
            detail = f"grown from {holder.elastic.size.text} to {size.text} onto idle devices"
            for trial in Trial.objects.filter(pk=holder.trial_id):
                trial_request_stop(trial=trial, reason=RESIZED, detail=detail)
            holder.stop_reason = RESIZED
            view_reserve(view=self.view, placements=placements)
            logger.info("Growing trial %s: %s", holder.trial_id, detail)

    def _grown(self, *, holder: Holder, experiment: QueuedExperiment
               ) -> tuple[Size, list[Placement]] | None:
        """The largest size it could run at on its own devices and idle ones, within its team's
        limit; None when none is larger than its size."""
        assert holder.elastic is not None
        free = free_map_with(view=self.view, holders=[holder])
        own_gpus = sum(WHOLE_MILLI for _, kind, _ in holder.devices if kind == KIND_GPU)
        own_cpus = sum(1 for _, kind, _ in holder.devices if kind == KIND_CPU)
        for size in holder.elastic.larger:
            needs = _needs(experiment=experiment, size=size)
            # Its quota as if it held nothing, and were not running yet.
            self.view.quota_gpus[holder.quota] -= own_gpus
            self.view.quota_cpus[holder.quota] -= own_cpus
            self.view.running[experiment.owner_id] -= 1
            try:
                state = quota_state(experiment=experiment, needs=needs, view=self.view)
            finally:
                self.view.quota_gpus[holder.quota] += own_gpus
                self.view.quota_cpus[holder.quota] += own_cpus
                self.view.running[experiment.owner_id] += 1
            if state.reason:
                continue  # beyond its guarantee it borrows, as its restart then will (lend)
            placements = gang_place(needs=needs, free=free,
                                    nodes=self._nodes(experiment=holder.elastic))
            if placements is not None:
                return size, placements
        return None

    def _place_now(
        self, *, experiment: QueuedExperiment, needs: list[TaskNeed], size: Size | None = None
    ) -> list[Placement] | None:
        shape = _shape(experiment=experiment, size=size)
        if shape in self.cannot_start:
            return None
        placements = gang_place(needs=needs, free=self.view.free,
                                nodes=self._nodes(experiment=experiment),
                                shared=self.view.shared, memory_mb=self.view.memory_mb)
        if placements is None:
            self.cannot_start.add(shape)
        return placements

    def _start(self, *, experiment: QueuedExperiment, placements: list[Placement],
               borrowed: bool = False, size: Size | None = None) -> None:
        # Decided here, written with the pass's other admissions (_starts_write).
        view_take(view=self.view, placements=placements)
        if experiment.workers_min or experiment.gpus_per_worker_min:
            size = size or _sizes(experiment=experiment)[-1]
            self.sizes[experiment.pk] = (size.workers, size.gpus_per_worker)
        key = quota_key(team_id=experiment.team_id, owner_id=experiment.owner_id)
        _, cpu_slots = needs_held(needs=[p.need for p in placements])
        gpu_milli = placements_gpu_milli(placements=placements)
        self.view.quota_gpus[key] += gpu_milli
        self.view.quota_cpus[key] += cpu_slots
        if borrowed:
            self.borrowed.add(experiment.pk)
            gpus, cpus = self.view.borrowed.get(key, (0, 0))
            self.view.borrowed[key] = (gpus + gpu_milli, cpus + cpu_slots)
        if experiment.kind == Experiment.Kind.TRAINING:
            self.view.running[experiment.owner_id] += 1
        self.starts.append((experiment, placements))

    def _wait(self, *, experiment: QueuedExperiment, needs: list[TaskNeed]) -> str:
        """Why it waits; reserves what it waits for when that is known (shares of GPUs wait
        for room without reserving or preempting)."""
        self.waiting = True
        if any(need.shared for need in needs):
            return share_pending_reason(
                needs=needs, where=where_text(pool=experiment.pool, gpu_type=experiment.gpu_type))
        plan = self._plan_wait(experiment=experiment, needs=needs)
        if plan is not None:
            placements, victims = plan
            self._preempt(victims=victims, experiment=experiment)
            view_reserve(view=self.view, placements=placements)
            return waiting_text(view=self.view, placements=placements)
        nodes = self._nodes(experiment=experiment)
        base = pending_reason(needs=needs, free=self.view.free, nodes=nodes,
                              where=where_text(pool=experiment.pool, gpu_type=experiment.gpu_type))
        if self.view.disk_full:
            disk = disk_full_text(disk_full=self.view.disk_full,
                                  min_free_bytes=selectors.disk_free_min_bytes())
            base = f"{base} {disk}" if self.view.free else disk
        reservation = self._reserve_head(experiment=experiment, needs=needs)
        if reservation:
            return f"{base} {reservation}"
        if self.view.reserved and gang_place(needs=needs, free=self.view.idle, nodes=nodes):
            return f"{base} Free devices are reserved for experiments ahead of it."
        return base

    def _reserve_head(self, *, experiment: QueuedExperiment, needs: list[TaskNeed]) -> str:
        """The backfill reservation of the first experiment that must wait for running ones
        (the first of each pool and GPU type asked for: a head waiting for pool A's devices
        would otherwise keep pool B's from ever being reserved)."""
        key = (experiment.pool, experiment.gpu_type)
        if key in self.heads_reserved:
            return ""
        placements = backfill_plan(view=self.view, needs=needs,
                                   nodes=self._nodes(experiment=experiment))
        if placements is None:
            return ""  # fits nowhere even with every device released: it blocks nobody
        self.heads_reserved.add(key)
        view_reserve(view=self.view, placements=placements)
        return reservation_text(view=self.view, placements=placements)

    def _plan_wait(
        self, *, experiment: QueuedExperiment, needs: list[TaskNeed]
    ) -> tuple[list[Placement], list[Holder]] | None:
        """Devices to wait for from stopping trials, plus lower-priority trials to preempt."""
        key = quota_key(team_id=experiment.team_id, owner_id=experiment.owner_id)
        shape = (_shape(experiment=experiment), key)
        if self.cannot_wait.get(shape, experiment.priority - 1) >= experiment.priority:
            return None
        kinds = {need_kind(need=need)[0] for need in needs}
        usable = [
            h
            for h in self.view.holders.values()
            if holder_unreserved(view=self.view, holder=h, kinds=kinds)
        ]
        stopping = [h for h in usable if h.stop_reason]
        nodes = self._nodes(experiment=experiment)
        if stopping:
            placements = gang_place(
                needs=needs, free=free_map_with(view=self.view, holders=stopping), nodes=nodes
            )
            if placements is not None:
                return placements, []
        # Lower priorities, and what other teams borrowed (it is within its guarantee: only
        # those reach here): elastic trials above their smallest size first (they are shrunk,
        # not stopped), then borrowed ones.
        candidates = sorted(
            (h for h in usable if not h.stop_reason and (
                h.priority < experiment.priority or (h.borrowed and h.quota != key))),
            key=lambda h: (
                not (h.elastic is not None and h.elastic.shrinkable),
                not (h.borrowed and h.quota != key),
                h.priority,
                -holder_unreserved(view=self.view, holder=h, kinds=kinds),
                -h.since.timestamp(),
            ),
        )
        found = holders_fewest(view=self.view, needs=needs, base=stopping, ordered=candidates,
                               nodes=nodes)
        if found is None:
            self.cannot_wait[shape] = experiment.priority
            return None
        return found

    def _preempt(self, *, victims: list[Holder], experiment: QueuedExperiment) -> None:
        """Stops the victims: an elastic one above its smallest size to restart smaller (on
        what the preemptor leaves), any other to resume once devices free up."""
        if not victims:
            return
        stops = {victim.trial_id: _stop_of(victim=victim, experiment=experiment)
                 for victim in victims}
        trials = list(Trial.objects.filter(pk__in=list(stops)).select_related("experiment"))
        for trial in trials:
            reason, detail = stops[trial.pk]
            trial_request_stop(trial=trial, reason=reason, detail=detail)
        if experiment.owner_is_staff:
            _staff_preemption_record(experiment=experiment, trials=trials, stops=stops)
        for victim in victims:
            victim.stop_reason = stops[victim.trial_id][0]
        # Victims' devices outside the reservation become "stopping" capacity for others.
        self.cannot_wait.clear()
        logger.info("Preempting trial(s) %s", ", ".join(str(v.trial_id) for v in victims))


def _staff_preemption_record(*, experiment: QueuedExperiment, trials: list[Trial],
                             stops: dict[int, tuple[str, str]]) -> None:
    """Staff may give any priority, above every team's band: their experiment stopping other
    users' trials is a staff action, an audit row on each victim with the staff member as its
    actor (in the pass's transaction)."""
    actor = User.objects.filter(pk=experiment.owner_id).first()
    for trial in trials:
        if trial.experiment.owner_id == experiment.owner_id:
            continue
        reason, detail = stops[trial.pk]
        audit_record(actor=actor, action=AuditAction.EXPERIMENT_PREEMPT, target=trial.experiment,
                     before={"state": trial.experiment.state, "trial": trial.pk},
                     after={"stop_requested": reason, "detail": detail,
                            "by_experiment": experiment.pk, "priority": experiment.priority})


def _stop_of(*, victim: Holder, experiment: QueuedExperiment) -> tuple[str, str]:
    if victim.elastic is None or not victim.elastic.shrinkable:
        return PREEMPTED, f"for experiment {experiment.pk} (priority {experiment.priority})"
    return RESIZED, (f"shrunk from {victim.elastic.size.text} for experiment {experiment.pk} "
                     f"(priority {experiment.priority})")


def _pending_reasons_save(*, experiments: list[QueuedExperiment]) -> None:
    """Write the reasons that changed (a start elsewhere, a quota reached, a new reservation).

    Raw SQL because bulk_update's CASE expression for ~1,000 rows costs more than all the
    scheduling decisions. An experiment that left the queue meanwhile keeps its own reason.
    """
    table = connection.ops.quote_name(Experiment._meta.db_table)
    queued = Experiment.State.QUEUED.value
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql":
            # In-process SQLite: one prepared statement run per row is the fastest.
            sql = f"UPDATE {table} SET pending_reason = %s WHERE id = %s AND state = %s"  # noqa: S608
            cursor.executemany(sql, [(e.pending_reason, e.pk, queued) for e in experiments])
            return
        # A server: one statement, two arrays, whose text the driver converts once.
        cursor.execute(
            f"UPDATE {table} AS e SET pending_reason = v.reason"  # noqa: S608
            " FROM unnest(%s::bigint[], %s::text[]) AS v(id, reason)"
            " WHERE e.id = v.id AND e.state = %s",
            [[e.pk for e in experiments], [e.pending_reason for e in experiments], queued],
        )
