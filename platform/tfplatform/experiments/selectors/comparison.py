"""Reads that compare experiments side by side."""

from dataclasses import dataclass, replace
from statistics import median

from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from tfplatform.accounts.models import User
from tfplatform.experiments.models import Experiment, Metric
from tfplatform.experiments.selectors.experiments import experiment_list
from tfplatform.experiments.selectors.progress import ACTIVE_STATES, EPOCH_MARK, THROUGHPUT


@dataclass(frozen=True)
class ComparisonRow:
    experiment: Experiment
    configuration: str
    batch_size: int | None  # per replica, as submitted
    global_batch_size: int | None  # as the strategy ran it
    images_per_sec: float | None  # median over finished epochs
    time_to_target_seconds: float | None
    accuracy: float | None
    val_accuracy: float | None
    duration_seconds: float | None
    speedup: float | None = None  # images/sec over the first row's


@dataclass(frozen=True)
class Comparison:
    rows: list[ComparisonRow]
    missing: list[int]  # asked for but not visible: unknown and someone else's look alike


def configuration_label(*, workers: int, gpus_per_worker: int, parameter_servers: int) -> str:
    """The benchmark-table name of a resource shape: CPU, 1 GPU, 4 GPUs, 2 workers × 2 GPUs..."""
    gpus = f"{gpus_per_worker} GPU{'s' if gpus_per_worker != 1 else ''}"
    if workers == 1 and not parameter_servers:
        return "CPU" if not gpus_per_worker else gpus if gpus_per_worker == 1 else f"{gpus}, 1 node"
    label = f"{workers} worker{'s' if workers != 1 else ''}"
    label += f" × {gpus}" if gpus_per_worker else " (CPU)"
    if parameter_servers:
        label += f" + {parameter_servers} PS"
    return label


def experiments_compare(*, user: User | AnonymousUser, ids: list[int]) -> Comparison:
    found = {e.pk: e for e in experiment_list(user=user).filter(pk__in=ids)}
    metrics = _last_epoch_metrics(experiment_ids=list(found))
    rates = _epoch_rates(experiment_ids=list(found))
    now = timezone.now()
    rows = []
    for pk in ids:
        experiment = found.get(pk)
        if experiment is None:
            continue
        last = metrics.get(pk, {})
        results = experiment.results or {}
        end = experiment.finished_at or (now if experiment.state in ACTIVE_STATES else None)
        batch = experiment.hyperparameters.get("batch_size")
        rows.append(
            ComparisonRow(
                experiment=experiment,
                configuration=configuration_label(
                    workers=experiment.workers,
                    gpus_per_worker=experiment.gpus_per_worker,
                    parameter_servers=experiment.parameter_servers,
                ),
                batch_size=int(batch) if isinstance(batch, int | float) else None,
                global_batch_size=results.get("global_batch_size") or None,
                images_per_sec=median(rates[pk]) if rates.get(pk) else None,
                time_to_target_seconds=last.get(
                    "time_to_target_seconds", results.get("time_to_target_seconds")
                ),
                accuracy=last.get("accuracy"),
                val_accuracy=last.get("val_accuracy"),
                duration_seconds=(end - experiment.started_at).total_seconds()
                if experiment.started_at and end
                else None,
            )
        )
    base = next((row.images_per_sec for row in rows if row.images_per_sec), None)
    rows = [
        replace(row, speedup=row.images_per_sec / base if base and row.images_per_sec else None)
        for row in rows
    ]
    return Comparison(rows=rows, missing=[pk for pk in ids if pk not in found])


def _last_epoch_metrics(*, experiment_ids: list[int]) -> dict[int, dict[str, float]]:
    """Per experiment, each epoch metric's value at the last epoch that reported it."""
    names = ("accuracy", "val_accuracy", "time_to_target_seconds")
    rows = (
        Metric.objects.filter(trial__experiment_id__in=experiment_ids, name__in=names)
        .order_by("epoch", "recorded_at", "pk")
        .values_list("trial__experiment_id", "name", "value")
    )
    last: dict[int, dict[str, float]] = {}
    for experiment, name, value in rows:
        values = last.setdefault(experiment, {})
        if name == "time_to_target_seconds":
            values.setdefault(name, value)  # the first time it was reached
        else:
            values[name] = value
    return last


def _epoch_rates(*, experiment_ids: list[int]) -> dict[int, list[float]]:
    """Per experiment, the images/sec of each finished epoch (the sampler's readings excluded)."""
    metrics = Metric.objects.filter(
        trial__experiment_id__in=experiment_ids, name__in=(THROUGHPUT, EPOCH_MARK)
    ).values_list("trial__experiment_id", "trial_id", "name", "recorded_at", "value")
    marks, rates = set(), []
    for experiment, trial, name, recorded_at, value in metrics:
        if name == EPOCH_MARK:
            marks.add((trial, recorded_at))
        else:
            rates.append((experiment, trial, recorded_at, value))
    per_experiment: dict[int, list[float]] = {}
    for experiment, trial, recorded_at, value in rates:
        if (trial, recorded_at) in marks:
            per_experiment.setdefault(experiment, []).append(value)
    return per_experiment
