"""7. Hyperparameter search: adaptive (successive halving) against random, on the same budget.

For each seed both searchers search the same space with the same budget of epochs, one after
the other (which goes first alternates by seed, so the machine's drift falls on both). Each
trial is the zoo's mlp on digits compiled and fed as a platform trial is (`model_compile`,
`dataset_train`, `dataset_eval`); val_accuracy is the platform's, on digits' held-out quarter.
The search loop is bench/search_loop.py; the decisions are the platform's own.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.report import Section, Table, number
from bench.search_loop import Epoch, SearchRun, search_run
from tfplatform.searches.searchers import Rungs, rungs_check, space_parse

SPACE: dict[str, Any] = {
    "learning_rate": {"low": 1e-4, "high": 0.3, "log": True},
    "hidden_units": {"low": 8, "high": 256, "log": True},
    "optimizer": {"values": ["adam", "sgd"]},
}
SEARCHERS = ("random", "adaptive")


class KerasTraining:
    """A trial of the zoo's mlp kept in memory between its rungs."""

    def __init__(self, *, data: Any, params: dict[str, Any], seed: int) -> None:
        from training import catalog
        from training.data.array_pipelines import dataset_eval, steps_per_epoch
        from training.scaling import batch_plan
        from training.trial.modelling import model_compile
        from training.trial.tfenv import keras
        from training.trial.zoo import ZOO_BUILDERS

        self.data, self.seed, self.done = data, seed, 0
        self.hparams = catalog.hyperparameters_resolve(model="mlp", values={**params, "seed": seed})
        batch = batch_plan(batch_size=self.hparams["batch_size"], replicas=1,
                           learning_rate=self.hparams["learning_rate"], scale=True,
                           warmup_epochs=0)
        self.global_batch = batch.global_batch_size
        self.steps = steps_per_epoch(examples=len(data.x_train), global_batch=self.global_batch)
        # One trial lives at a time: dropping the last one's graph state keeps the 20th trial
        # as quick to build as the first.
        keras.backend.clear_session()
        keras.utils.set_random_seed(seed)
        self.model = ZOO_BUILDERS["mlp"](hparams=self.hparams, data=data)
        model_compile(model=self.model, hparams=self.hparams, batch=batch,
                      steps_per_epoch=self.steps, exact_evaluation=False)
        self.validation = dataset_eval(data=data, batch_size=self.global_batch)

    def epochs_train(self, *, epochs: int) -> list[Epoch]:
        from training.data.array_pipelines import dataset_train
        from training.trial.tfenv import keras

        ended: list[float] = []
        stamp = keras.callbacks.LambdaCallback(
            on_epoch_end=lambda *_: ended.append(time.monotonic()))
        # A fresh pipeline per stretch, seeded by where the trial is: a stretch does not replay
        # the first one's order, and a configuration's order is the same in both searchers.
        train = dataset_train(data=self.data, batch_size=self.global_batch,
                              seed=self.seed + self.done, augment=False)
        history = self.model.fit(
            train, initial_epoch=self.done, epochs=self.done + epochs, steps_per_epoch=self.steps,
            validation_data=self.validation, callbacks=[stamp], verbose=0,
        )
        self.done += epochs
        values = history.history["val_accuracy"]
        return [Epoch(value=float(v), ended_at=t) for v, t in zip(values, ended, strict=True)]

    def close(self) -> None:
        del self.model


def searches_run(*, seeds: list[int], budget: int, rungs: Rungs
                 ) -> list[tuple[SearchRun, SearchRun]]:
    """For each seed, (random, adaptive)."""
    from training.arrays import digits_load

    data = digits_load()
    dimensions = space_parse(space=SPACE)

    def training_start(*, params: dict[str, Any], seed: int) -> KerasTraining:
        return KerasTraining(data=data, params=params, seed=seed)

    # TensorFlow's first model pays one-off start-up costs; neither searcher should carry them.
    training_start(params={"learning_rate": 0.001, "hidden_units": 8}, seed=0
                   ).epochs_train(epochs=1)
    results = []
    for position, seed in enumerate(seeds):
        order = SEARCHERS if position % 2 == 0 else tuple(reversed(SEARCHERS))
        runs = {searcher: search_run(searcher=searcher, dimensions=dimensions, rungs=rungs,
                                     budget=budget, seed=seed, training_start=training_start)
                for searcher in order}
        results.append((runs["random"], runs["adaptive"]))
    return results


def _cells(runs: list[SearchRun]) -> tuple[str, ...]:
    """A searcher's cells of one seed's row, or (several runs) of the mean row."""
    def mean(values: list[float]) -> float:
        return statistics.fmean(values)

    best = (f"#{runs[0].best_trial.index} ({len(runs[0].best_trial.epochs)} ep)"
            if len(runs) == 1 else "")
    return (number(mean([r.best_value for r in runs]), 4), best,
            number(mean([r.seconds_to_best for r in runs]), 1),
            f"{number(mean([len(r.trials) for r in runs]), 1 if len(runs) > 1 else 0)} / "
            f"{number(mean([r.epochs_spent for r in runs]), 1 if len(runs) > 1 else 0)}")


def _params(params: dict[str, Any]) -> str:
    return (f"{params['optimizer']}, lr {params['learning_rate']:.2g}, "
            f"{params['hidden_units']} units")


def search_measure(*, seeds: list[int], budget: int, grace_period: int, reduction_factor: int,
                   max_epochs: int) -> Section:
    started = time.monotonic()
    rungs = rungs_check(grace_period=grace_period, reduction_factor=reduction_factor,
                        max_epochs=max_epochs)
    section = search_section(results=searches_run(seeds=seeds, budget=budget, rungs=rungs),
                             rungs=rungs)
    section.seconds = time.monotonic() - started
    return section


def search_section(*, results: list[tuple[SearchRun, SearchRun]], rungs: Rungs) -> Section:
    seeds, budget = [r.seed for r, _ in results], results[0][0].budget
    randoms, adaptives = [r for r, _ in results], [a for _, a in results]
    ratio = (statistics.fmean(a.best_value for a in adaptives)
             / statistics.fmean(r.best_value for r in randoms))
    rows = [(str(r.seed), *_cells([r]), *_cells([a]), number(a.best_value / r.best_value, 3))
            for r, a in results]
    rows.append(("mean", *_cells(randoms), *_cells(adaptives), number(ratio, 3)))
    columns = tuple(f"{s} {c}" for s in SEARCHERS
                    for c in ("best val_accuracy", "best trial", "s to best", "trials / epochs"))
    return Section(
        title="7. Hyperparameter search",
        description=(
            f"{budget} epochs of the zoo's mlp on digits for each searcher and seed (seeds "
            f"{', '.join(map(str, seeds))}), one trial at a time, over learning_rate 1e-4..0.3 "
            f"(log), hidden_units 8..256 (log) and optimizer adam/sgd. Both searchers get the same "
            f"configurations in the same order from the platform's searchers module, each from "
            f"the same initial weights: random search trains each to {rungs.max_epochs} epochs; "
            f"adaptive search stops a trial at a rung ({', '.join(map(str, rungs.budgets()))} "
            f"epochs) unless Optuna's successive-halving pruner (reduction factor "
            f"{rungs.reduction_factor}) promotes it, and trains it on from where it stopped "
            f"otherwise. s to best: from the search's start to the epoch at which the trial that "
            f"ends up best reached its best val_accuracy; best trial: #configuration (epochs it "
            f"trained)."
        ),
        tables=[Table(columns=("seed", *columns, "adaptive ÷ random"), rows=rows)],
        notes=[
            f"Adaptive ÷ random, mean best val_accuracy: {ratio:.3f}; seconds to the best "
            f"trial {statistics.fmean(a.seconds_to_best for a in adaptives):.1f} (adaptive) "
            f"against {statistics.fmean(r.seconds_to_best for r in randoms):.1f} (random), "
            f"of searches of {statistics.fmean(a.seconds for a in adaptives):.1f} and "
            f"{statistics.fmean(r.seconds for r in randoms):.1f} s.",
            *(f"Seed {r.seed}'s best: random {_params(r.best_trial.params)}; adaptive "
              f"{_params(a.best_trial.params)}." for r, a in results),
        ],
    )
