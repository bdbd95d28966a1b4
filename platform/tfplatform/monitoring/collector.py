"""The platform's own metrics (`tfplatform_*`), made from the database at each scrape by a
custom collector: nothing is counted in memory, so every process reports the same numbers."""

import bisect
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tfplatform.monitoring import selectors

# Seconds from queued to running: a free slot starts in seconds, a quota or preemption wait
# in minutes to hours.
ADMISSION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
                     7200.0, 21600.0, 86400.0)


def _admission_wait() -> GaugeHistogramMetricFamily:
    """A gauge histogram: the distribution of waits of trials admitted within the window, as it
    is now (it shrinks as admissions age out), so it is read without rate()."""
    family = GaugeHistogramMetricFamily(
        "tfplatform_admission_wait_seconds",
        "Seconds from queued to running of trials that started within the recent window.",
        labels=["team"],
    )
    by_team: dict[str, list[float]] = defaultdict(list)
    for team, seconds in selectors.admission_waits():
        by_team[team].append(seconds)
    for team, waits in sorted(by_team.items()):
        waits.sort()
        buckets = [(str(bound), float(bisect.bisect_right(waits, bound)))
                   for bound in ADMISSION_BUCKETS]
        buckets.append(("+Inf", float(len(waits))))
        family.add_metric([team], buckets, gsum_value=sum(waits))
    return family


def _pending() -> Iterator[Metric]:
    yield GaugeMetricFamily("tfplatform_queue_length", "Experiments queued for the scheduler.",
                            value=selectors.queue_length())
    pending = GaugeMetricFamily(
        "tfplatform_pending_experiments",
        "Experiments not running yet (queued or scheduled), by team and kind of pending reason.",
        labels=["team", "reason"],
    )
    for (team, reason), count in sorted(selectors.pending_by_team_and_reason().items()):
        pending.add_metric([team, reason], count)
    yield pending


def _gpus() -> Iterator[Metric]:
    allocated = GaugeMetricFamily("tfplatform_team_gpus_allocated",
                                  "GPUs held by the team's trials now.", labels=["team"])
    quota = GaugeMetricFamily("tfplatform_team_gpu_quota",
                              "GPUs the team may hold at once.", labels=["team"])
    for team, (held, limit) in sorted(selectors.team_gpus().items()):
        allocated.add_metric([team], held)
        if limit is not None:
            quota.add_metric([team], limit)
    yield allocated
    yield quota
    # An info metric (`tfplatform_gpu_allocation_info`, always 1): a lookup to join DCGM's
    # exporter's series with on UUID.
    info = InfoMetricFamily("tfplatform_gpu_allocation",
                            "Who holds each GPU now, by its UUID.", labels=["UUID"])
    for gpu in selectors.gpu_holders():
        info.add_metric([gpu.uuid], {
            "node": gpu.node, "gpu": str(gpu.index), "experiment": str(gpu.experiment_id),
            "trial": str(gpu.trial_id), "user": gpu.user, "team": gpu.team})
    yield info


def _history() -> Iterator[Metric]:
    preemptions = CounterMetricFamily(
        "tfplatform_preemptions", "Trials preempted by higher-priority ones.", labels=["team"])
    for team, count in sorted(selectors.preemptions_by_team().items()):
        preemptions.add_metric([team], count)
    yield preemptions
    outcomes = CounterMetricFamily(
        "tfplatform_trial_outcomes", "Finished trials by outcome.", labels=["outcome"])
    for outcome, count in selectors.trial_outcomes().items():
        outcomes.add_metric([outcome], count)
    yield outcomes


def _nodes_and_training() -> Iterator[Metric]:
    nodes = GaugeMetricFamily("tfplatform_nodes", "Worker nodes by state.", labels=["state"])
    for state, count in selectors.node_states().items():
        nodes.add_metric([state], count)
    yield nodes
    throughput = GaugeMetricFamily(
        "tfplatform_experiment_images_per_second",
        "Latest training throughput of each running experiment.",
        labels=["experiment", "user", "team"],
    )
    for row in selectors.running_throughput():
        throughput.add_metric([str(row.experiment_id), row.user, row.team], row.images_per_sec)
    yield throughput


class PlatformCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from _pending()
        yield _admission_wait()
        yield from _gpus()
        yield from _history()
        yield from _nodes_and_training()

    def describe(self) -> Iterator[Metric]:
        # Registered into a fresh registry per scrape: no names to check, and no query made
        # at registration.
        return iter(())
