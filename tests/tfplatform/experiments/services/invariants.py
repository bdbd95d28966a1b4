"""Invariants of the cluster state that must hold at every instant, whatever schedulers do."""

from django.conf import settings
from django.db.models import Count, Q

from tfplatform.cluster.models import Allocation
from tfplatform.experiments.models import Experiment, Trial

LIVE = (Trial.State.PENDING, Trial.State.RUNNING)


def check_invariants() -> None:
    """Each check is one statement, so it sees one consistent state of the database."""
    held = Allocation.objects.filter(released_at__isnull=True)
    doubled = held.exclude(device=None).values("device").annotate(n=Count("id")).filter(n__gt=1)
    assert list(doubled) == [], "a device has two live allocations"

    per_team = (
        held.filter(device__kind="gpu", trial__experiment__team__isnull=False)
        .values("trial__experiment__team__name", "trial__experiment__team__gpu_quota")
        .annotate(n=Count("id"))
    )
    for row in per_team:
        assert row["n"] <= row["trial__experiment__team__gpu_quota"], f"over quota: {row}"
    per_loner = (
        held.filter(device__kind="gpu", trial__experiment__team__isnull=True)
        .values("trial__experiment__owner__username").annotate(n=Count("id"))
    )
    for row in per_loner:
        assert row["n"] <= settings.PLATFORM.user_gpu_quota, f"over a user's quota: {row}"

    live_allocation = Q(trials__allocations__released_at__isnull=True)
    experiments = Experiment.objects.annotate(
        gpus=Count("trials__allocations", filter=live_allocation & gpu_kind(), distinct=True),
        cpus=Count("trials__allocations", filter=live_allocation & ~gpu_kind(), distinct=True),
        live_trials=Count("trials", filter=Q(trials__state__in=LIVE), distinct=True),
    )
    for experiment in experiments:
        if experiment.state in (Experiment.State.SCHEDULED, Experiment.State.RUNNING):
            gpu_workers = experiment.workers if experiment.gpus_per_worker else 0
            expected = (
                experiment.gpus_requested,
                experiment.workers - gpu_workers + experiment.parameter_servers,
                1,
            )
        else:
            expected = (0, 0, 0)  # queued or ended: holds nothing, runs nothing
        found = (experiment.gpus, experiment.cpus, experiment.live_trials)
        assert found == expected, f"{experiment} ({experiment.state}): gang {found} != {expected}"


def gpu_kind() -> Q:
    return Q(trials__allocations__device__kind="gpu")
