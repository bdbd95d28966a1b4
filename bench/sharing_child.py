"""The GPU-sharing benchmark's own process (Django is set up here, never in `python -m bench`):

    DATABASE_URL=sqlite:///... python -m bench.sharing_child --out result.json --jobs 1000

A day's trace of mixed jobs (whole GPUs, shares of one and elastic jobs, two priorities, three
teams whose loads peak at different hours) on simulated nodes of 8 GPUs, through the real
scheduler (`scheduler_pass`) on a simulated clock (the scheduler's own clock too, so an elastic
trial is grown only after PLATFORM_ELASTIC_GROW_AFTER_SECONDS of simulated time): at each arrival
or end the pass runs, as the platform wakes its scheduler; a trial it preempts or resizes stops at
once and queues again with the work it has left (it resumes from its checkpoint). An elastic job's
work is GPU-time at its largest size: at half the GPUs it takes twice as long (its global batch is
kept by gradient accumulation). Run twice on the same trace:

- **today**: whole GPUs only (a share is rounded up to one GPU per worker, an elastic job runs at
  its largest size) and quotas as hard caps;
- **sharing**: shares packed onto GPUs, elastic jobs from 1 GPU to their largest, and fair share:
  each team guaranteed its quota and allowed to borrow up to the whole cluster, reclaimed when its
  owner needs it.

Reported: GPU allocation (allocated GPU-seconds ÷ capacity over the day), mean and p95 queue
wait (arrival to first start) overall and per team, each team's share of the GPU time against
its guarantee, and how many trials were preempted.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import django

DAY = 86_400.0
GPUS_PER_NODE = 8
LOAD = 1.0  # the day's GPU-hours asked for ÷ the cluster's
# Team: (guaranteed GPUs as a share of the cluster, share of the jobs, the hour its load peaks).
TEAMS = {"vision": (0.4, 0.45, 4.0), "speech": (0.4, 0.40, 16.0), "research": (0.2, 0.15, 10.0)}
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Job:
    index: int
    team: str
    arrival: float
    duration: float
    workers: int
    gpus_per_worker: int  # whole GPUs; 0 with a share
    gpu_milli: int  # a share of one GPU per worker; 0 for whole GPUs
    priority: int
    elastic: bool = False  # whole GPUs on one worker, from 1 to gpus_per_worker


# Of the single-worker jobs of 2 GPUs or more, the share that is elastic.
ELASTIC_SHARE = 0.5


def trace_make(*, jobs: int, seed: int, capacity: int) -> list[Job]:
    """Arrivals peak around each team's hour; a third of the jobs ask for a share of a GPU. Run
    times are scaled so that the day's demand is LOAD × the cluster's GPU-day: enough that a
    team at its peak wants more than its quota while another's GPUs sit idle."""
    rng = random.Random(seed)
    names, weights = list(TEAMS), [TEAMS[name][1] for name in TEAMS]
    made = []
    for index in range(jobs):
        team = rng.choices(names, weights)[0]
        hour = rng.gauss(TEAMS[team][2], 3.0) % 24
        shared = rng.random() < 1 / 3
        # No job larger than its team's quota: the platform refuses those at submission.
        largest = min(GPUS_PER_NODE, round(TEAMS[team][0] * capacity))
        sizes = [size for size in (1, 1, 2, 4, 8) if size <= largest]
        made.append(Job(
            index=index, team=team, arrival=hour * 3600.0,
            duration=min(6 * 3600.0, max(600.0, rng.lognormvariate(math.log(3600.0), 0.8))),
            workers=rng.choice([size for size in (1, 1, 2, 4) if size <= largest])
            if shared else 1,
            gpus_per_worker=0 if shared else rng.choice(sizes),
            gpu_milli=rng.choice((250, 500)) if shared else 0,
            priority=rng.choice((0, 0, 0, 5)),
        ))
    demand = sum(job.duration * job.workers * (job.gpus_per_worker or job.gpu_milli / 1000)
                 for job in made)
    scale = LOAD * capacity * DAY / demand
    # Drawn apart, so the trace is otherwise the one without elastic jobs.
    flags = random.Random(seed + 1)
    made = [replace(job, duration=job.duration * scale,
                    elastic=job.workers == 1 and job.gpus_per_worker >= 2
                    and flags.random() < ELASTIC_SHARE) for job in made]
    return sorted(made, key=lambda job: (job.arrival, job.index))


def _setup() -> None:
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def simulate(*, trace: list[Job], nodes: int, policy: str) -> dict[str, Any]:
    """One policy over the trace, on a fresh cluster; what it allocated and how long jobs
    waited."""
    from django.conf import settings
    from django.db.models import Q

    from tfplatform.accounts.models import Team, User
    from tfplatform.cluster.models import Allocation, Device, Node
    from tfplatform.experiments.models import Experiment, Trial
    from tfplatform.experiments.services import scheduling
    from tfplatform.experiments.services.scheduling import scheduler_pass

    for model in (Allocation, Trial, Experiment, Device, Node, User, Team):
        model.objects.all().delete()
    capacity = nodes * GPUS_PER_NODE
    sharing = policy == "sharing"
    owners = {}
    for name, (guaranteed, _, _) in TEAMS.items():
        quota = round(guaranteed * capacity)
        team = Team.objects.create(name=name, gpu_quota=quota, cpu_slot_quota=capacity * 4,
                                   gpu_limit=capacity if sharing else None)
        owners[name] = User.objects.create(username=f"sim-{name}", team=team)
    made = Node.objects.bulk_create(
        Node(hostname=f"sim-{i}", queue=f"node.sim-{i}", cpu_count=32) for i in range(nodes))
    Device.objects.bulk_create(
        Device(node=node, kind=kind, index=index, name="sim", emulated=True)
        for node in made for kind, count in ((Device.Kind.GPU, GPUS_PER_NODE),
                                             (Device.Kind.CPU, 4))
        for index in range(count))

    clock = {"now": 0.0}

    class SimulatedTime:
        """The scheduler's clock (an elastic trial's age) is the simulation's."""

        @staticmethod
        def now() -> datetime:
            return EPOCH + timedelta(seconds=clock["now"])

    scheduling.timezone = SimulatedTime  # type: ignore[assignment]

    def heartbeat() -> None:
        Node.objects.update(last_heartbeat=datetime.now(UTC))

    events: list[tuple[float, int, int]] = [(job.arrival, 0, job.index) for job in trace]
    heapq.heapify(events)
    jobs = {job.index: job for job in trace}
    by_experiment: dict[int, int] = {}  # experiment → job, and back
    experiment_of: dict[int, int] = {}
    left = {job.index: job.duration for job in trace}
    started_at: dict[int, float] = {}
    first_start: dict[int, float] = {}
    gpu_seconds: dict[str, float] = dict.fromkeys(TEAMS, 0.0)
    held_milli: dict[int, int] = {}
    preempted = resized = 0
    generation: dict[int, int] = {}

    def arrive(job: Job) -> None:
        whole = job.gpus_per_worker or (0 if sharing else 1)
        experiment = Experiment.objects.create(
            owner=owners[job.team], team=owners[job.team].team, name=f"job-{job.index}",
            model="mlp", dataset="digits", workers=job.workers, gpus_per_worker=whole,
            gpus_per_worker_min=1 if sharing and job.elastic else 0,
            gpu_milli=job.gpu_milli if sharing and not job.gpus_per_worker else 0,
            priority=job.priority, pending_reason="Waiting for the scheduler.")
        Experiment.objects.filter(pk=experiment.pk).update(
            created_at=EPOCH + timedelta(seconds=job.arrival))
        by_experiment[experiment.pk] = job.index
        experiment_of[job.index] = experiment.pk

    def account(index: int, until: float) -> None:
        """GPU time held within the day (what allocation is measured over)."""
        job = jobs[index]
        held = min(until, DAY) - min(started_at[index], DAY)
        gpu_seconds[job.team] += held_milli[index] / 1000 * held

    def rate(index: int) -> float:
        """Its progress per second: 1 at its full size, less on fewer GPUs (elastic)."""
        job = jobs[index]
        full = job.workers * (job.gpus_per_worker or job.gpu_milli / 1000) * 1000
        return held_milli[index] / full if job.elastic and sharing else 1.0

    def stop(index: int, *, done: bool) -> None:
        experiment = experiment_of[index]
        Allocation.objects.filter(trial__experiment_id=experiment, released_at=None).update(
            released_at=datetime.now(UTC))
        Trial.objects.filter(experiment_id=experiment).exclude(
            state__in=("completed", "canceled")).update(
            state="completed" if done else "canceled")
        Experiment.objects.filter(pk=experiment).update(
            state="completed" if done else "queued",
            pending_reason="" if done else "Preempted; resumes from its last checkpoint.")

    def schedule() -> None:
        nonlocal preempted, resized
        for _ in range(3):  # a reclaim frees devices that the next pass hands over
            heartbeat()
            scheduler_pass()
            for experiment, share in Allocation.objects.filter(
                    released_at=None, device__kind="gpu", trial__state="pending",
                    trial__started_at=None).values_list("trial__experiment_id", "share_milli"):
                index = by_experiment[experiment]
                if index not in started_at:
                    held_milli[index] = held_milli.get(index, 0) + share
            fresh = [i for i in held_milli if i not in started_at]
            for index in fresh:
                started_at[index] = clock["now"]
                first_start.setdefault(index, clock["now"])
                generation[index] = generation.get(index, 0) + 1
                heapq.heappush(events, (clock["now"] + left[index] / rate(index), 1,
                                        index * 1000 + generation[index]))
            now = EPOCH + timedelta(seconds=clock["now"])
            Allocation.objects.filter(trial__state="pending", trial__started_at=None).update(
                created_at=now)
            Trial.objects.filter(state="pending").update(started_at=now)
            victims = Trial.objects.filter(stop_reason__in=("preempted", "resized")).exclude(
                state__in=("completed", "canceled")).values_list("experiment_id", "stop_reason")
            if not victims:
                return
            for experiment, reason in list(victims):
                index = by_experiment[experiment]
                account(index, clock["now"])
                left[index] -= (clock["now"] - started_at.pop(index)) * rate(index)
                held_milli.pop(index)
                stop(index, done=False)
                if reason == "resized":
                    resized += 1
                else:
                    preempted += 1

    # The platform's scheduler loop also runs a pass every few seconds, not only at arrivals and
    # ends: an elastic trial below its size is looked at again once it may grow.
    grow_after = settings.PLATFORM.elastic_grow_after_seconds
    tick_at = [-1.0]
    last_end = 0.0

    def tick() -> None:
        small = any(rate(index) < 1.0 for index in started_at)
        if small and tick_at[0] <= clock["now"]:
            tick_at[0] = clock["now"] + grow_after
            heapq.heappush(events, (tick_at[0], 2, 0))

    while events:
        now = events[0][0]
        clock["now"] = now
        while events and events[0][0] == now:
            _, kind, key = heapq.heappop(events)
            if kind == 0:
                arrive(jobs[key])
                continue
            if kind == 2:
                continue  # the loop's pass, below
            index, run = divmod(key, 1000)
            if generation.get(index) != run or index not in started_at:
                continue  # ended by a preemption since
            account(index, now)
            started_at.pop(index)
            held_milli.pop(index)
            stop(index, done=True)
            last_end = now
        schedule()
        tick()
    end = DAY
    waits = {index: first_start[index] - jobs[index].arrival for index in first_start}
    unfinished = Experiment.objects.filter(~Q(state="completed")).count()
    return {
        # The last job's end (the clock also passes the planned ends of runs cut short since).
        "policy": policy, "capacity": capacity, "makespan": last_end,
        "allocation": sum(gpu_seconds.values()) / (capacity * end),
        "wait": _waits(list(waits.values())),
        "team_wait": {team: _waits([w for i, w in waits.items() if jobs[i].team == team])
                      for team in TEAMS},
        "team_share": {team: gpu_seconds[team] / (capacity * end) for team in TEAMS},
        "guarantee": {team: TEAMS[team][0] for team in TEAMS},
        "preempted": preempted, "resized": resized, "unfinished": unfinished,
    }


def _waits(values: list[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p95": 0.0}
    ordered = sorted(values)
    return {"mean": sum(ordered) / len(ordered),
            "p95": ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20261129)
    args = parser.parse_args()
    _setup()
    trace = trace_make(jobs=args.jobs, seed=args.seed, capacity=args.nodes * GPUS_PER_NODE)
    results = [simulate(trace=trace, nodes=args.nodes, policy=policy)
               for policy in ("today", "sharing")]
    args.out.write_text(json.dumps({"jobs": args.jobs, "nodes": args.nodes,
                                    "results": results}))


if __name__ == "__main__":
    main()
