"""Every write to searches: creation, the step after each trial's experiment ends, cancel, and
deploying the best trial. The searcher's choices come from searchers.py (Optuna); the trials are
ordinary experiments, so the scheduler places, preempts and resumes them like any other."""

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from tfplatform.accounts.models import User
from tfplatform.cluster.dispatch import scheduler_wake_on_commit
from tfplatform.cluster.placement import gpu_fraction_of
from tfplatform.core.annotations import annotations_apply
from tfplatform.core.errors import Conflict, InvalidInput, InvalidTransition, LimitReached
from tfplatform.experiments import validation
from tfplatform.experiments.models import Environment, Experiment
from tfplatform.experiments.services import admission, submission
from tfplatform.experiments.services.transitions import TERMINAL_STATES, experiment_continue
from tfplatform.modelregistry.models import ModelVersion
from tfplatform.modelregistry.services.publish import experiment_deploy
from tfplatform.notifications.events import EventKind
from tfplatform.notifications.services import event_publish
from tfplatform.searches import searchers
from tfplatform.searches.models import Search, SearchTag, SearchTrial
from tfplatform.searches.selectors import search_best_trial, search_trial_values

logger = logging.getLogger(__name__)
Outcome = SearchTrial.Outcome
MAX_TRIALS = 1_000
MAX_CONCURRENT = 64
# A search whose first trials all fail is not worth spending the rest of its budget on.
FAILED_FIRST_TRIALS = 3


@dataclass(frozen=True, kw_only=True)
class SearchRequest:
    name: str
    searcher: str
    space: dict[str, Any]
    model: str
    dataset: str
    metric: str = "val_accuracy"
    mode: str = ""  # empty: from the metric's name, as an experiment's target
    max_trials: int | None = None  # grid: every point; random and adaptive: 10
    max_concurrent: int = 2
    max_epochs: int | None = None  # the hyperparameters' epochs (the model's default)
    grace_period: int = 1
    reduction_factor: int = 3
    seed: int = 0
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    workers: int = 1
    gpus_per_worker: int = 0
    parameter_servers: int = 0
    gpu_fraction: float | None = None
    gpu_memory_mb: int = 0
    pool: str = ""
    gpu_type: str = ""
    priority: int = 0
    max_restarts: int = 3
    environment: Environment | None = None


def search_create(*, owner: User, request: SearchRequest) -> Search:
    """Checks the whole search up front (space, budgets, and a trial's configuration at every
    end of every range), then submits its first trials; nothing is kept if any is refused."""
    if request.searcher not in searchers.SEARCHERS:
        raise InvalidInput(f"searcher must be one of {', '.join(searchers.SEARCHERS)}.",
                           field="searcher")
    dimensions = searchers.space_parse(space=request.space)
    base = validation.hyperparameters_clean(model=request.model,
                                            hyperparameters=request.hyperparameters)
    max_epochs = request.max_epochs or int(base["epochs"])
    rungs = searchers.rungs_check(grace_period=request.grace_period,
                                  reduction_factor=request.reduction_factor,
                                  max_epochs=max_epochs)
    if request.searcher == "adaptive" and "epochs" in request.space:
        raise InvalidInput("An adaptive search sets every trial's epochs by its rungs; take "
                           "epochs out of the space and set max_epochs.", field="space")
    _space_bounds_check(model=request.model, base=request.hyperparameters, dimensions=dimensions)
    target = validation.target_check(metric=request.metric, mode=request.mode, value=None)
    max_trials = _max_trials(request=request, dimensions=dimensions)
    if not 1 <= request.max_concurrent <= MAX_CONCURRENT:
        raise InvalidInput(f"max_concurrent must be between 1 and {MAX_CONCURRENT}.",
                           field="max_concurrent")
    if not 0 <= request.seed < 2**31:
        raise InvalidInput("seed must be between 0 and 2**31 - 1.", field="seed")
    gpu_milli = admission.gpu_share_milli(fraction=request.gpu_fraction,
                                          memory_mb=request.gpu_memory_mb,
                                          whole_gpus=request.gpus_per_worker)
    with transaction.atomic():
        search = Search.objects.create(
            owner=owner, team_id=owner.team_id, name=request.name, searcher=request.searcher,
            space={d.name: d.as_dict() for d in dimensions}, metric=target.metric,
            mode=target.mode, max_trials=max_trials, max_concurrent=request.max_concurrent,
            max_epochs=rungs.max_epochs, grace_period=rungs.grace_period,
            reduction_factor=rungs.reduction_factor, seed=request.seed, model=request.model,
            # Every trial reads the dataset version newest now, whenever it is submitted.
            dataset=validation.dataset_reference_pin(owner=owner, reference=request.dataset),
            environment=request.environment,
            hyperparameters=dict(request.hyperparameters), workers=request.workers,
            gpus_per_worker=request.gpus_per_worker, parameter_servers=request.parameter_servers,
            gpu_milli=gpu_milli, gpu_memory_mb=request.gpu_memory_mb, pool=request.pool,
            gpu_type=request.gpu_type, priority=request.priority,
            max_restarts=request.max_restarts,
        )
        _trials_fill(search=search)
    return search


def _space_bounds_check(*, model: str, base: dict[str, Any],
                        dimensions: list[searchers.Dimension]) -> None:
    """Every value a range can give is one an experiment accepts: each end of each range and
    each listed value, checked by the experiment's own validation."""
    for dimension in dimensions:
        ends = dimension.values if dimension.kind == "choice" else (
            (int(dimension.low), int(dimension.high)) if dimension.kind == "int"
            else (dimension.low, dimension.high))
        for value in ends:
            try:
                validation.hyperparameters_clean(model=model,
                                                 hyperparameters={**base, dimension.name: value})
            except InvalidInput as error:
                raise InvalidInput(f"space.{dimension.name}: {error.message}",
                                   field="space") from error


def _max_trials(*, request: SearchRequest, dimensions: list[searchers.Dimension]) -> int:
    if request.searcher == "grid":
        points = searchers.grid_size(dimensions=dimensions)
        if points > searchers.MAX_GRID_POINTS:
            raise InvalidInput(f"The grid has {points} points; at most "
                               f"{searchers.MAX_GRID_POINTS}.", field="space")
        return min(request.max_trials or points, points)
    trials = request.max_trials or 10
    if not 1 <= trials <= MAX_TRIALS:
        raise InvalidInput(f"max_trials must be between 1 and {MAX_TRIALS}.", field="max_trials")
    return trials


def search_advance(*, search_id: int) -> Search | None:
    """The step after one of its trials' experiments ended: record what that trial reached,
    promote or stop it at its rung (adaptive), start trials into free slots, and end the
    search once its budget is spent and nothing runs. Safe to call any time, twice, in any
    order: it only acts on what has changed."""
    with transaction.atomic():
        search = Search.objects.select_for_update().filter(pk=search_id).first()
        if search is None:
            return None
        ended = [m for m in search.trials.select_related("experiment")
                 .filter(outcome=Outcome.ACTIVE)
                 if m.experiment.state in TERMINAL_STATES]
        for member in ended:
            _trial_settle(search=search, member=member)
        if search.state == Search.State.RUNNING:
            _trials_fill(search=search)
            _search_end_if_done(search=search)
    return search


def _trial_settle(*, search: Search, member: SearchTrial) -> None:
    experiment = member.experiment
    values = search_trial_values(search=search, experiment_id=experiment.pk).get(
        experiment.pk, {})
    member.epochs_trained = max(values, default=0)
    if values:
        best_epoch = (max if search.mode == "max" else min)(values, key=lambda e: values[e])
        member.best_epoch, member.best_value = best_epoch, values[best_epoch]
    if experiment.state == Experiment.State.FAILED:
        member.outcome = Outcome.FAILED
    elif experiment.state == Experiment.State.CANCELED:
        member.outcome = Outcome.CANCELED
    elif search.state != Search.State.RUNNING:
        member.outcome = Outcome.STOPPED  # ended its rung as the search was canceled
    else:
        _rung_end(search=search, member=member, values=values)
    member.save()


def _rung_end(*, search: Search, member: SearchTrial, values: dict[int, float]) -> None:
    budgets = _rungs(search=search).budgets()
    epochs = int(member.experiment.hyperparameters.get("epochs", 0))
    if search.searcher != "adaptive" or epochs >= search.max_epochs:
        member.outcome = Outcome.FINISHED
        return
    value = values.get(epochs)
    if value is None:
        # It stopped early (stop_at_target) or never reported the metric: nothing to rank.
        member.outcome = Outcome.STOPPED
        return
    # Judged on the rungs before this one: the pruner records this rung's value itself.
    deciding = _record(member, values=values)
    member.rung_values = {**member.rung_values, str(member.rung): value}
    others = [_record(m) for m in search.trials.exclude(pk=member.pk) if m.rung_values]
    promoted = searchers.rung_promote(
        deciding=deciding, others=others,
        dimensions=searchers.space_parse(space=search.space), rungs=_rungs(search=search),
        maximize=search.mode == "max",
    )
    if not promoted:
        member.outcome = Outcome.STOPPED
        return
    member.rung += 1
    next_epochs = budgets[member.rung]
    experiment_continue(
        experiment=member.experiment, epochs=next_epochs,
        reason=f"Promoted to rung {member.rung} of search #{search.pk}: trains on to "
               f"{next_epochs} epochs from its checkpoint at epoch {epochs}.",
    )
    scheduler_wake_on_commit()


def _rungs(*, search: Search) -> searchers.Rungs:
    return searchers.Rungs(grace_period=search.grace_period,
                           reduction_factor=search.reduction_factor, max_epochs=search.max_epochs)


def _record(member: SearchTrial, *, values: dict[int, float] | None = None
            ) -> searchers.TrialRecord:
    return searchers.TrialRecord(
        number=member.index, params=member.params, values_by_epoch=values or {},
        rung_values={int(rung): value for rung, value in member.rung_values.items()},
    )


def _trials_fill(*, search: Search) -> None:
    """Start trials while slots are free and the budget lasts. The first failures are a
    search's own: when every one of its first trials failed, it ends rather than spending its
    budget on the same error."""
    members = list(search.trials.all())
    active = sum(1 for m in members if m.outcome == Outcome.ACTIVE)
    created = len(members)
    if created >= FAILED_FIRST_TRIALS and all(
            m.outcome == Outcome.FAILED for m in members[:FAILED_FIRST_TRIALS]) and not any(
            m.outcome in (Outcome.FINISHED, Outcome.STOPPED) for m in members):
        if active == 0:
            first = members[0].experiment
            _search_finish(search=search, state=Search.State.COMPLETED, reason=(
                f"Its first {FAILED_FIRST_TRIALS} trials all failed; the first said: "
                f"{first.error[:200]}"))
        return
    while active < search.max_concurrent and created < search.max_trials:
        try:
            with transaction.atomic():
                _trial_start(search=search, index=created)
        except LimitReached:
            if created == 0:
                raise  # at submission, not one trial could queue: the user's answer is this
            # The owner's queue is full: filled again as trials end (or by the scheduler's
            # loop, searches_settle_overdue, when none is left to end).
            return
        except InvalidInput as error:
            if not members:
                raise  # at submission: the user's answer is this error
            # Since submission its dataset or environment went away, or a quota shrank.
            _search_finish(search=search, state=Search.State.COMPLETED, reason=(
                f"Trial {created} could not be submitted: {error.message}"))
            return
        active += 1
        created += 1


def _trial_start(*, search: Search, index: int) -> SearchTrial:
    dimensions = searchers.space_parse(space=search.space)
    params = searchers.configuration_sample(dimensions=dimensions, searcher=search.searcher,
                                            index=index, seed=search.seed)
    epochs = _rungs(search=search).budgets()[0] if search.searcher == "adaptive" \
        else search.max_epochs
    hyperparameters = {**search.hyperparameters, **params}
    if search.searcher == "adaptive" or "epochs" not in params:
        hyperparameters["epochs"] = epochs  # a grid or random space may search epochs itself
    experiment = submission.experiment_create(
        owner=search.owner,
        request=submission.ExperimentRequest(
            name=f"{search.name} · trial {index}"[:200], model=search.model,
            dataset=search.dataset, hyperparameters=hyperparameters, workers=search.workers,
            gpus_per_worker=search.gpus_per_worker, parameter_servers=search.parameter_servers,
            gpu_fraction=gpu_fraction_of(milli=search.gpu_milli),
            gpu_memory_mb=search.gpu_memory_mb, pool=search.pool, gpu_type=search.gpu_type,
            priority=search.priority, target_metric=search.metric, target_mode=search.mode,
            max_restarts=search.max_restarts, environment=search.environment,
        ),
    )
    return SearchTrial.objects.create(search=search, index=index, experiment=experiment,
                                      params=params)


def _search_end_if_done(*, search: Search) -> None:
    members = list(search.trials.all())
    if search.state != Search.State.RUNNING or any(
            m.outcome == Outcome.ACTIVE for m in members):
        return
    if len(members) < search.max_trials:
        return  # _trials_fill ended it (its first trials failed) or starts more
    counts = {o: sum(1 for m in members if m.outcome == o) for o in Outcome.values}
    spent = "Every point of its grid trained" if search.searcher == "grid" else \
        f"Its budget of {search.max_trials} trials is spent"
    _search_finish(search=search, state=Search.State.COMPLETED, reason=(
        f"{spent}: {counts[Outcome.FINISHED]} finished, {counts[Outcome.STOPPED]} stopped at a "
        f"rung, {counts[Outcome.FAILED]} failed, {counts[Outcome.CANCELED]} canceled."))


def _search_finish(*, search: Search, state: str, reason: str) -> None:
    search.state = state
    search.end_reason = reason[:300]
    search.finished_at = Now()
    search.save()
    search.refresh_from_db()
    event_publish(kind=EventKind.SEARCH_ENDED, owner_id=search.owner_id, team_id=search.team_id,
                  payload={"id": search.pk, "name": search.name, "state": search.state,
                           "reason": search.end_reason})


def search_cancel(*, user: User, search: Search) -> Search:
    """Ends the search now and cancels every trial still queued or training (their devices go
    back as each stops)."""
    with transaction.atomic():
        current = Search.objects.select_for_update().get(pk=search.pk)
        if current.state != Search.State.RUNNING:
            raise InvalidTransition(f"The search is already {current.state}.")
        _search_finish(search=current, state=Search.State.CANCELED,
                       reason=f"Canceled by {user.username}.")
        for member in current.trials.select_related("experiment").filter(
                outcome=Outcome.ACTIVE):
            if member.experiment.state not in TERMINAL_STATES:
                submission.experiment_cancel(experiment=member.experiment, actor=user)
    search.refresh_from_db()
    return search


def search_best_deploy(*, user: User, search: Search, model_name: str,
                       tflite: bool = False) -> ModelVersion:
    """`tflite`: also a TF Lite conversion, as a single experiment's deploy offers."""
    best = search_best_trial(search=search)
    if best is None:
        raise Conflict("No trial of this search has completed with a value of its metric yet.")
    return experiment_deploy(user=user, experiment=best.experiment, model_name=model_name,
                             tflite=tflite)


def searches_settle_overdue() -> list[int]:
    """The scheduler loop's safety net: searches with a trial whose experiment ended but whose
    step never ran (the broker was away when it ended)."""
    ended = SearchTrial.objects.filter(
        outcome=Outcome.ACTIVE, experiment__state__in=list(TERMINAL_STATES)
    ).values_list("search_id", flat=True)
    # A search its owner's queued limit kept from filling, with no trial left to end.
    starved = Search.objects.filter(state=Search.State.RUNNING).exclude(
        trials__outcome=Outcome.ACTIVE).values_list("pk", flat=True)
    overdue = sorted({*ended, *starved})
    for search_id in overdue:
        try:
            search_advance(search_id=search_id)
        except Exception:
            logger.exception("Search %s could not advance", search_id)
    return overdue


def search_annotate(*, search: Search, tags: Sequence[str] | None = None,
                    note: str | None = None, archived: bool | None = None) -> Search:
    """Replace what is given (all its tags, its note, archived), as experiment_annotate does;
    whoever may see the search may."""
    return annotations_apply(obj=search, tag_model=SearchTag, tagged_field="search", tags=tags,
                             note=note, archived=archived)
