"""One search of item 7 on an epoch budget: which configuration trains next, for how long.

Both searchers ask the platform's searchers module for configuration 0, 1, 2, … of the same
seed, which gives both the same configurations in the same order; they differ only in what
happens at a rung. Random search trains every configuration to max_epochs; adaptive search asks
`rung_promote` at each rung whether the trial goes on, and stops it otherwise. Trials run one at
a time (a search with one slot: ASHA's promotions in the order trials reach their rungs), and a
trial that goes on continues its own model: no epoch is trained twice. Both trainings stop when
the budget's last epoch is spent, mid-trial if need be, and count only epochs trained.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tfplatform.searches.searchers import (
    Dimension,
    Rungs,
    TrialRecord,
    configuration_sample,
    rung_promote,
)


@dataclass(frozen=True, kw_only=True)
class Epoch:
    value: float  # val_accuracy
    ended_at: float  # time.monotonic()


class Training(Protocol):
    """One trial's model, trained on from where it stopped."""

    def epochs_train(self, *, epochs: int) -> list[Epoch]: ...

    def close(self) -> None: ...


TrainingStart = Callable[..., Training]  # (*, params, seed) -> Training


@dataclass(frozen=True, kw_only=True)
class TrialOutcome:
    index: int
    params: dict[str, Any]
    epochs: list[Epoch]

    @property
    def best(self) -> Epoch:
        # The earliest epoch of the best value: when the search had it.
        return max(self.epochs, key=lambda e: (e.value, -e.ended_at))


@dataclass(frozen=True, kw_only=True)
class SearchRun:
    searcher: str
    seed: int
    budget: int
    trials: list[TrialOutcome]
    started_at: float
    ended_at: float

    @property
    def epochs_spent(self) -> int:
        return sum(len(t.epochs) for t in self.trials)

    @property
    def best_trial(self) -> TrialOutcome:
        return max(self.trials, key=lambda t: (t.best.value, -t.best.ended_at))

    @property
    def best_value(self) -> float:
        return self.best_trial.best.value

    @property
    def seconds_to_best(self) -> float:
        return self.best_trial.best.ended_at - self.started_at

    @property
    def seconds(self) -> float:
        return self.ended_at - self.started_at


def trial_seed(*, seed: int, index: int) -> int:
    """The model's seed (initial weights, shuffling) for a configuration: the same in both
    searchers, so configuration i starts from the same weights in each."""
    return seed * 10_000 + index


def search_run(
    *,
    searcher: str,
    dimensions: list[Dimension],
    rungs: Rungs,
    budget: int,
    seed: int,
    training_start: TrainingStart,
) -> SearchRun:
    if searcher not in ("random", "adaptive"):
        raise ValueError(f"searcher must be random or adaptive, not {searcher}")
    started = time.monotonic()
    trials: list[TrialOutcome] = []
    records: list[TrialRecord] = []
    spent = 0
    while spent < budget:
        index = len(trials)
        params = configuration_sample(dimensions=dimensions, searcher=searcher, index=index,
                                      seed=seed)
        training = training_start(params=params, seed=trial_seed(seed=seed, index=index))
        epochs: list[Epoch] = []
        rung_values: dict[int, float] = {}
        try:
            # Random search trains through the same rung boundaries without deciding, so a
            # configuration sees the same data order in both searchers.
            for rung, target in enumerate(rungs.budgets()):
                count = min(target - len(epochs), budget - spent)
                epochs += training.epochs_train(epochs=count)
                spent += count
                if spent == budget or target == rungs.max_epochs:
                    break
                if searcher == "random":
                    continue
                values = {number: e.value for number, e in enumerate(epochs, start=1)}
                goes_on = rung_promote(
                    deciding=TrialRecord(number=index, params=params, values_by_epoch=values,
                                         rung_values=dict(rung_values)),
                    others=records, dimensions=dimensions, rungs=rungs, maximize=True,
                )
                # Optuna keeps a rung's value of every trial that reached it (NaN aside):
                # later trials compete with it whether it went on or not.
                if not math.isnan(values[target]):
                    rung_values[rung] = values[target]
                if not goes_on:
                    break
        finally:
            training.close()
        trials.append(TrialOutcome(index=index, params=params, epochs=epochs))
        records.append(TrialRecord(
            number=index, params=params,
            values_by_epoch={number: e.value for number, e in enumerate(epochs, start=1)},
            rung_values=rung_values,
        ))
    return SearchRun(searcher=searcher, seed=seed, budget=budget, trials=trials,
                     started_at=started, ended_at=time.monotonic())
