"""Finding experiments: text, tags, who and what ran, hyperparameter and metric conditions.

Every condition narrows `experiment_list`, so another team's runs can match nothing and count
for nothing. A metric's *final* value is the last one recorded at an epoch's end (over all its
trials); its *best* is the largest or smallest of them, as training/target.py's mode_infer reads
the name (accuracy-like: largest; loss- and error-like: smallest).
"""

import re
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.db.models import (
    Count,
    Exists,
    F,
    FloatField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
)

from tfplatform.accounts.models import User
from tfplatform.core.conditions import Condition, condition_q, json_value
from tfplatform.core.errors import InvalidInput
from tfplatform.experiments.models import Experiment, ExperimentTag, Metric
from tfplatform.experiments.selectors.experiments import experiment_list
from tfplatform.experiments.selectors.progress import EPOCH_MARK
from training.target import mode_infer

# What `ordering` may name besides final.<metric>, best.<metric> and hp.<name>.
ORDER_FIELDS = ("id", "name", "state", "created_at", "started_at", "finished_at", "priority")


ORDER_PREFIXES = ("final.", "best.", "hp.")


TEXT_WORDS_MAX = 10


_VERSIONED = re.compile(r".+@[0-9]{1,9}")


TAG_COUNTS_MAX = 1000


@dataclass(frozen=True)
class ExperimentQuery:
    text: str = ""
    owner: str = ""
    team: str = ""
    states: tuple[str, ...] = ()
    dataset: str = ""
    environment: str = ""
    model: str = ""
    tags: tuple[str, ...] = ()
    # False: only those not archived (the list's default); True: only archived; None: both.
    archived: bool | None = False
    hyperparameters: tuple[Condition, ...] = ()
    final: tuple[Condition, ...] = ()
    best: tuple[Condition, ...] = ()
    ordering: str = ""


def experiment_search(*, user: User | AnonymousUser,
                      query: ExperimentQuery) -> QuerySet[Experiment]:
    experiments = experiment_list(user=user)
    if query.archived is not None:
        experiments = experiments.filter(archived=query.archived)
    for word in query.text.split()[:TEXT_WORDS_MAX]:
        experiments = experiments.filter(
            Q(name__icontains=word) | Q(note__icontains=word)
            | Exists(ExperimentTag.objects.filter(experiment=OuterRef("pk"),
                                                  name__icontains=word))
        )
    # `name@N`: that version of a registered dataset (experiments pin theirs at submission).
    dataset, _, version = query.dataset.rpartition("@") if _VERSIONED.fullmatch(
        query.dataset) else (query.dataset, "", "")
    exact = {"owner__username": query.owner, "team__name": query.team,
             "dataset": dataset, "dataset_version_number": int(version) if version else None,
             "environment__name": query.environment, "model": query.model}
    experiments = experiments.filter(**{k: v for k, v in exact.items() if v not in (None, "")})
    if query.states:
        experiments = experiments.filter(state__in=query.states)
    for tag in query.tags:
        experiments = experiments.filter(
            Exists(ExperimentTag.objects.filter(experiment=OuterRef("pk"), name=tag)))
    for condition in query.hyperparameters:
        experiments = experiments.filter(condition_q(
            condition=condition,
            expression=json_value(column="hyperparameters", condition=condition)))
    for kind, conditions in (("final", query.final), ("best", query.best)):
        for condition in conditions:
            experiments = experiments.filter(condition_q(
                condition=condition, expression=_metric(kind=kind, name=condition.name)))
    return _ordered(experiments=experiments, ordering=query.ordering)


def experiment_search_with_progress(*, user: User | AnonymousUser,
                                    query: ExperimentQuery) -> QuerySet[Experiment]:
    """The search's experiments, each with `epochs_done` (the list page's progress bars), and
    their tags."""
    return experiment_search(user=user, query=query).annotate(
        epochs_done=Max("trials__metrics__epoch", filter=Q(trials__metrics__name=EPOCH_MARK))
    ).prefetch_related("tags")


def experiment_tag_counts(*, user: User | AnonymousUser) -> QuerySet[Any, Any]:
    """The tags on the experiments `user` can see, most used first, with how many carry each."""
    visible = experiment_list(user=user).values("pk")
    return (ExperimentTag.objects.filter(experiment__in=visible).values("name")
            .annotate(count=Count("id")).order_by("-count", "name")[:TAG_COUNTS_MAX])


def experiment_ordering_check(*, ordering: str) -> str:
    field = ordering.removeprefix("-")
    if field in ORDER_FIELDS:
        return ordering
    prefix = next((p for p in ORDER_PREFIXES if field.startswith(p)), None)
    name = field.removeprefix(prefix or "")
    if prefix is None or not name or len(name) > 100 or not _plain(name):
        raise InvalidInput(
            f"Order by one of {', '.join(ORDER_FIELDS)}, or final.METRIC, best.METRIC or "
            "hp.NAME, with - in front for descending.", field="ordering")
    return ordering


def _plain(name: str) -> bool:
    return all(c.isalnum() or c in "_./-" for c in name) and name[0] not in "./-"


def _ordered(*, experiments: QuerySet[Experiment], ordering: str) -> QuerySet[Experiment]:
    if not ordering:
        return experiments
    descending = ordering.startswith("-")
    field = ordering.removeprefix("-")
    if field in ORDER_FIELDS:
        key = F(field)
    elif field.startswith("hp."):
        number = Condition(name=field.removeprefix("hp."), operator="=", value=0.0)
        key = json_value(column="hyperparameters", condition=number)  # type: ignore[assignment]
    else:
        kind, name = field.split(".", 1)
        key = _metric(kind=kind, name=name)  # type: ignore[assignment]
    # Runs without the value go last either way: they are not the best nor the worst.
    order = key.desc(nulls_last=True) if descending else key.asc(nulls_last=True)
    return experiments.order_by(order, "-id")


def _metric(*, kind: str, name: str) -> Subquery:
    rows = Metric.objects.filter(trial__experiment=OuterRef("pk"), name=name,
                                 epoch__isnull=False)
    if kind == "final":
        return Subquery(rows.order_by("-recorded_at", "-id").values("value")[:1],
                        output_field=FloatField())
    best = Max("value") if mode_infer(metric=name) == "max" else Min("value")
    return Subquery(
        rows.order_by().values("trial__experiment").annotate(best=best).values("best")[:1],
        output_field=FloatField(),
    )
