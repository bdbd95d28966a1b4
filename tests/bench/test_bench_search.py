"""Item 7 on a tiny budget: the real mlp, the platform's decisions, the search's bookkeeping."""

from typing import Any

from bench.__main__ import _arguments
from bench.report import section_text
from bench.search import SPACE, KerasTraining, search_section
from bench.search_loop import search_run
from tfplatform.searches.searchers import rungs_check, space_parse
from training.arrays import digits_load

BUDGET = 4
# Seed 11's first configuration (adam, lr 0.02) learns digits in an epoch; its next two (adam
# at 1e-4, sgd at 5e-4) are far behind after one: successive halving stops both there.
SEED = 11


def test_adaptive_search_stops_trials_at_rungs_and_spends_the_same_budget() -> None:
    rungs = rungs_check(grace_period=1, reduction_factor=2, max_epochs=2)  # rungs 1, 2
    data, dimensions = digits_load(), space_parse(space=SPACE)

    def training_start(*, params: dict[str, Any], seed: int) -> KerasTraining:
        return KerasTraining(data=data, params=params, seed=seed)

    random, adaptive = (
        search_run(searcher=searcher, dimensions=dimensions, rungs=rungs, budget=BUDGET,
                   seed=SEED, training_start=training_start)
        for searcher in ("random", "adaptive")
    )

    for run in (random, adaptive):
        assert run.epochs_spent == BUDGET
        ends = [e.ended_at for t in run.trials for e in t.epochs]
        assert ends == sorted(ends)  # one trial at a time, each epoch trained once
        assert 0 < run.seconds_to_best <= run.seconds
        assert run.best_value == max(e.value for t in run.trials for e in t.epochs)
    # Random: every configuration to max_epochs.
    assert [len(t.epochs) for t in random.trials] == [2, 2]
    # Adaptive: the same configurations in the same order; the first (its rungs' best so far)
    # goes on to max_epochs, the next two stop at their first rung.
    assert [len(t.epochs) for t in adaptive.trials] == [2, 1, 1]
    assert [t.params for t in adaptive.trials[:2]] == [t.params for t in random.trials]
    for trial in adaptive.trials[1:]:
        assert trial.epochs[0].value < adaptive.trials[0].epochs[0].value

    text = section_text(search_section(results=[(random, adaptive)], rungs=rungs))
    assert "== 7. Hyperparameter search" in text
    assert "seed  random best val_accuracy" in text and "adaptive ÷ random" in text
    assert "2 / 4" in text and "3 / 4" in text  # trials / epochs, side by side
    assert "Adaptive ÷ random, mean best val_accuracy: " in text


def test_search_is_an_item() -> None:
    args = _arguments(["--only", "search", "--search-budget", "12", "--search-seeds", "2"])
    assert args.items == ["search"] and (args.search_budget, args.search_seeds) == (12, 2)
