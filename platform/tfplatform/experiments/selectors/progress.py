"""Reads of a running experiment's progress: epochs done, chart points."""

from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth.models import AnonymousUser
from django.db.models import Max, Q, QuerySet

from tfplatform.accounts.models import User
from tfplatform.experiments.models import Experiment, Metric
from tfplatform.experiments.selectors.experiments import experiment_list

# Emitted once per finished epoch next to the epoch's other metrics (same trial, same time):
# it tells an epoch's images/sec apart from the sampler's, which share the name.
EPOCH_MARK = "epoch_seconds"


EPOCH_CHART_METRICS = ("loss", "val_loss", "accuracy", "val_accuracy")


THROUGHPUT = "images_per_sec"


CHART_BATCH = 2000


ACTIVE_STATES = (Experiment.State.QUEUED, Experiment.State.SCHEDULED, Experiment.State.RUNNING)


def experiment_list_with_progress(*, user: User | AnonymousUser) -> QuerySet[Experiment]:
    """The visible experiments, each with `epochs_done`: the last epoch it finished."""
    return experiment_list(user=user).annotate(
        epochs_done=Max("trials__metrics__epoch", filter=Q(trials__metrics__name=EPOCH_MARK))
    )


def experiment_epochs_done(*, experiment: Experiment) -> int:
    done = Metric.objects.filter(trial__experiment=experiment, name=EPOCH_MARK).aggregate(
        done=Max("epoch")
    )["done"]
    return int(done or 0)


@dataclass
class ChartPoints:
    """Metric points recorded after `cursor`, as chart series of (x, y) pairs.

    Epoch metrics are drawn against the epoch; images/sec against seconds since the experiment
    started, both the sampler's readings during epochs and each finished epoch's average.
    """

    cursor: int
    more: bool
    epochs: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    images_per_sec: list[tuple[float, float]] = field(default_factory=list)
    images_per_sec_epoch: list[tuple[float, float]] = field(default_factory=list)


def experiment_chart_points(*, experiment: Experiment, after: int = 0) -> ChartPoints:
    wanted = (*EPOCH_CHART_METRICS, THROUGHPUT)
    rows = list(
        Metric.objects.filter(trial__experiment=experiment, name__in=wanted, pk__gt=after)
        .order_by("pk")
        .values_list("pk", "trial_id", "name", "epoch", "value", "recorded_at")[: CHART_BATCH + 1]
    )
    more = len(rows) > CHART_BATCH
    rows = rows[:CHART_BATCH]
    points = ChartPoints(cursor=rows[-1][0] if rows else after, more=more)
    if not rows:
        return points
    marks = _epoch_marks(experiment=experiment)
    start = experiment.started_at or min(row[5] for row in rows)
    for _, trial, name, epoch, value, recorded_at in rows:
        if name != THROUGHPUT:
            if epoch is not None:
                points.epochs.setdefault(name, []).append((epoch, value))
            continue
        seconds = round(max((recorded_at - start).total_seconds(), 0.0), 1)
        series = (
            points.images_per_sec_epoch if (trial, recorded_at) in marks else points.images_per_sec
        )
        series.append((seconds, value))
    return points


def _epoch_marks(*, experiment: Experiment) -> set[tuple[int, datetime]]:
    marks = Metric.objects.filter(trial__experiment=experiment, name=EPOCH_MARK)
    return set(marks.values_list("trial_id", "recorded_at"))
