"""Reads for the platform's Prometheus metrics, computed from the database at each scrape so
they never drift from what the pages show. Team labels are team names ("" without a team)."""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Case, CharField, Count, F, OuterRef, Q, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from tfplatform.accounts.models import Team
from tfplatform.cluster.elastic import RESIZED
from tfplatform.cluster.models import Allocation, Device, Node
from tfplatform.cluster.placement import PREEMPTED, WHOLE_MILLI
from tfplatform.experiments.models import Experiment, Metric, Trial
from tfplatform.experiments.selectors.progress import THROUGHPUT

# Pending reasons are sentences with counts and host names in them; a label takes the kind of
# reason only (bounded), by the sentence's beginning as the scheduler and workers write it.
REASON_PREFIXES = (
    ("Team quota", "quota"),
    ("Quota of a user", "quota"),
    ("Its owner has", "user_limit"),
    ("Team limit", "quota"),
    ("Over its team's guarantee", "borrowing"),
    ("Waiting to reclaim", "reclaiming"),
    ("No worker node", "no_nodes"),
    ("Needs ", "gpus"),
    ("Waiting for a free CPU slot", "cpu_slots"),
    ("Out of disk space", "disk_pressure"),
    ("Waiting for devices: preempting", "preempting"),
    ("Waiting for the scheduler", "scheduler"),
    ("Waiting for ", "stopping_trials"),
    ("Preempted", "preempted"),
    ("Resizing", "resizing"),
    ("Restarting after", "restarting"),
    ("Building environment", "environment_build"),
)
PENDING_STATES = (Experiment.State.QUEUED, Experiment.State.SCHEDULED)
FINISHED_TRIAL_STATES = (Trial.State.COMPLETED, Trial.State.FAILED, Trial.State.CANCELED)
OUTCOMES = (*FINISHED_TRIAL_STATES, PREEMPTED, RESIZED)


def _reason_kind() -> Case:
    return Case(
        # "Needs 3 CPU slots on one node; ..." (a workspace's), before "Needs " (GPUs).
        When(pending_reason__regex=r"^Needs [0-9]+ CPU slots", then=Value("cpu_slots")),
        *(When(pending_reason__startswith=prefix, then=Value(kind))
          for prefix, kind in REASON_PREFIXES),
        When(pending_reason="", state=Experiment.State.SCHEDULED, then=Value("starting")),
        When(pending_reason="", then=Value("none")),
        default=Value("other"),
        output_field=CharField(),
    )


def queue_length() -> int:
    return Experiment.objects.filter(state=Experiment.State.QUEUED).count()


def pending_by_team_and_reason() -> dict[tuple[str, str], int]:
    """Queued and scheduled (not yet running) experiments by team and kind of pending reason."""
    rows = (
        Experiment.objects.filter(state__in=PENDING_STATES)
        .annotate(reason_kind=_reason_kind(), team_name=Coalesce("team__name", Value("")))
        .values("team_name", "reason_kind")
        .annotate(n=Count("id"))
    )
    return {(row["team_name"], row["reason_kind"]): row["n"] for row in rows}


def admission_waits(*, window: timedelta | None = None) -> list[tuple[str, float]]:
    """(team, seconds from queued to running) of trials that started within `window`: a first
    trial waited since its experiment's submission, a restart since its predecessor ended."""
    if window is None:
        window = timedelta(seconds=settings.PLATFORM.metrics_admission_window_seconds)
    previous_end = Trial.objects.filter(
        experiment_id=OuterRef("experiment_id"), restart_count=OuterRef("restart_count") - 1
    ).values("finished_at")[:1]
    trials = (
        Trial.objects.filter(started_at__gte=timezone.now() - window)
        .annotate(
            queued_at=Coalesce(Subquery(previous_end), F("experiment__created_at")),
            team_name=Coalesce("experiment__team__name", Value("")),
        )
        .values_list("team_name", "queued_at", "started_at")
    )
    return [(team, max(0.0, (started - queued).total_seconds()))
            for team, queued, started in trials]


def team_gpus() -> dict[str, tuple[float, int | None]]:
    """Team → (GPUs its trials hold now, shares as their parts; its GPU quota); "" are users
    without a team, whose quota is per user (None here)."""
    held = {
        name: milli / WHOLE_MILLI for name, milli in
        Allocation.objects.filter(released_at__isnull=True, device__kind=Device.Kind.GPU)
        .annotate(team_name=Coalesce("trial__experiment__team__name", Value("")))
        .values_list("team_name")
        .annotate(n=Sum("share_milli"))
        .values_list("team_name", "n")
    }
    gpus: dict[str, tuple[float, int | None]] = {
        name: (held.get(name, 0), quota)
        for name, quota in Team.objects.values_list("name", "gpu_quota")
    }
    if "" in held:
        gpus[""] = (held[""], None)
    return gpus


def preemptions_by_team() -> dict[str, int]:
    """Trials ever asked to stop for a higher-priority one (from the trials' own records)."""
    rows = (
        Trial.objects.filter(stop_reason=PREEMPTED)
        .annotate(team_name=Coalesce("experiment__team__name", Value("")))
        .values_list("team_name")
        .annotate(n=Count("id"))
        .values_list("team_name", "n")
    )
    return dict(rows)


def trial_outcomes() -> dict[str, int]:
    """Finished trials by outcome; a preempted trial counts as "preempted" and an elastic one
    stopped to change its size as "resized", not "canceled"."""
    outcome = Case(
        When(state=Trial.State.CANCELED, stop_reason=PREEMPTED, then=Value(PREEMPTED)),
        When(state=Trial.State.CANCELED, stop_reason=RESIZED, then=Value(RESIZED)),
        default=F("state"),
        output_field=CharField(),
    )
    rows = (
        Trial.objects.filter(state__in=FINISHED_TRIAL_STATES)
        .annotate(outcome=outcome)
        .values_list("outcome")
        .annotate(n=Count("id"))
        .values_list("outcome", "n")
    )
    found = dict(rows)
    return {str(name): found.get(name, 0) for name in OUTCOMES}


def node_states() -> dict[str, int]:
    found = dict(Node.objects.values("state").annotate(n=Count("id")).values_list("state", "n"))
    return {str(state): found.get(state, 0) for state in Node.State.values}


@dataclass(frozen=True, kw_only=True)
class Throughput:
    experiment_id: int
    user: str
    team: str
    images_per_sec: float


def running_throughput() -> list[Throughput]:
    """The latest images/sec each running experiment's current trial reported (the sampler's
    series the experiment page charts)."""
    latest = Metric.objects.filter(trial_id=OuterRef("pk"), name=THROUGHPUT).order_by(
        "-recorded_at", "-id").values("value")[:1]
    trials = (
        Trial.objects.filter(state=Trial.State.RUNNING,
                             experiment__state=Experiment.State.RUNNING)
        .annotate(rate=Subquery(latest), team_name=Coalesce("experiment__team__name", Value("")))
        .filter(rate__isnull=False)
        .values_list("experiment_id", "experiment__owner__username", "team_name", "rate")
    )
    return [Throughput(experiment_id=e, user=u, team=t, images_per_sec=r)
            for e, u, t, r in trials]


@dataclass(frozen=True, kw_only=True)
class GpuHolder:
    uuid: str
    node: str
    index: int
    experiment_id: int
    trial_id: int
    user: str
    team: str


def gpu_holders() -> list[GpuHolder]:
    """Each GPU held now, by its UUID (what NVML and DCGM's exporter name it by)."""
    rows = (
        Allocation.objects.filter(released_at__isnull=True, device__kind=Device.Kind.GPU)
        .exclude(Q(device__uuid=""))
        .annotate(team_name=Coalesce("trial__experiment__team__name", Value("")))
        .values_list("device__uuid", "node__hostname", "device__index",
                     "trial__experiment_id", "trial__id", "trial__experiment__owner__username",
                     "team_name")
        .order_by("node__hostname", "device__index")
    )
    return [GpuHolder(uuid=uuid, node=node, index=index, experiment_id=experiment,
                      trial_id=trial, user=user, team=team)
            for uuid, node, index, experiment, trial, user, team in rows]
