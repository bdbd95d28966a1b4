"""The searchers' choices: grid points, random draws within bounds and scales, ASHA's cut."""

import itertools
import math

import pytest

from tfplatform.core.errors import InvalidInput
from tfplatform.searches.searchers import (
    Rungs,
    TrialRecord,
    configuration_sample,
    grid_size,
    rung_promote,
    space_parse,
)

SPACE = {
    "learning_rate": {"low": 1e-4, "high": 1e-1, "log": True},
    "hidden_units": {"low": 8, "high": 512, "log": True},
    "dropout": {"low": 0.0, "high": 0.5},
    "optimizer": {"values": ["adam", "sgd"]},
}


def test_grid_covers_exactly_the_product_of_its_choices() -> None:
    dimensions = space_parse(space={"optimizer": {"values": ["adam", "sgd", "rmsprop"]},
                                    "hidden_units": {"low": 16, "high": 64, "step": 16},
                                    "augment": {"values": [True, False]}})
    size = grid_size(dimensions=dimensions)
    points = [configuration_sample(dimensions=dimensions, searcher="grid", index=i, seed=0)
              for i in range(size)]
    expected = set(itertools.product(["adam", "sgd", "rmsprop"], [16, 32, 48, 64],
                                     [True, False]))
    assert size == len(expected) == 24
    assert {(p["optimizer"], p["hidden_units"], p["augment"]) for p in points} == expected
    with pytest.raises(InvalidInput, match="no more points"):
        configuration_sample(dimensions=dimensions, searcher="grid", index=size, seed=0)


def test_random_draws_respect_bounds_and_log_scales() -> None:
    dimensions = space_parse(space=SPACE)
    draws = [configuration_sample(dimensions=dimensions, searcher="random", index=i, seed=7)
             for i in range(400)]
    rates = [d["learning_rate"] for d in draws]
    units = [d["hidden_units"] for d in draws]
    assert all(1e-4 <= r <= 1e-1 for r in rates)
    assert all(isinstance(u, int) and 8 <= u <= 512 for u in units)
    assert all(0.0 <= d["dropout"] <= 0.5 for d in draws)
    assert {d["optimizer"] for d in draws} == {"adam", "sgd"}
    # Log-uniform: half the draws below the geometric middle (a linear draw puts ~3 % there).
    below = sum(r < math.sqrt(1e-4 * 1e-1) for r in rates) / len(rates)
    assert 0.4 < below < 0.6
    below_units = sum(u < math.sqrt(8 * 512) for u in units) / len(units)
    assert 0.4 < below_units < 0.6
    below_dropout = sum(d["dropout"] < 0.25 for d in draws) / len(draws)
    assert 0.4 < below_dropout < 0.6


def test_the_same_seed_asks_the_same_configurations_again() -> None:
    dimensions = space_parse(space=SPACE)
    first = [configuration_sample(dimensions=dimensions, searcher="random", index=i, seed=3)
             for i in range(5)]
    again = [configuration_sample(dimensions=dimensions, searcher="adaptive", index=i, seed=3)
             for i in range(5)]
    other = [configuration_sample(dimensions=dimensions, searcher="random", index=i, seed=4)
             for i in range(5)]
    assert first == again
    assert first != other
    assert len({repr(c) for c in first}) == 5


@pytest.mark.parametrize(("space", "message"), [
    ({}, "at least one hyperparameter"),
    ({"lr": 0.1}, "must be an object"),
    ({"lr": {"low": 1, "high": 1}}, "low must be below high"),
    ({"lr": {"low": 0, "high": 1, "log": True}}, "log scale needs low > 0"),
    ({"lr": {"low": "a", "high": 1}}, "needs numbers"),
    ({"lr": {"low": 0.0, "high": float("inf")}}, "needs numbers"),
    ({"lr": {"values": []}}, "list of 1 to"),
    ({"lr": {"values": [1, 1]}}, "repeats a value"),
    ({"lr": {"values": [{"a": 1}]}}, "only strings, numbers"),
    ({"lr": {"low": 0.5, "high": 2.5, "type": "int"}}, "whole numbers"),
    ({"lr": {"low": 1, "high": 5, "step": 0}}, "step must be a positive int"),
    ({"lr": {"low": 1, "high": 5, "spread": 2}}, "unknown keys: spread"),
])
def test_a_malformed_space_says_which_entry_is_wrong(space: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        space_parse(space=space)


def test_a_grid_refuses_a_continuous_range() -> None:
    dimensions = space_parse(space={"learning_rate": {"low": 1e-4, "high": 1e-1}})
    with pytest.raises(InvalidInput, match="continuous range has no grid"):
        grid_size(dimensions=dimensions)


def test_rungs_grow_by_the_reduction_factor_up_to_max_epochs() -> None:
    assert Rungs(grace_period=1, reduction_factor=3, max_epochs=9).budgets() == [1, 3, 9]
    assert Rungs(grace_period=2, reduction_factor=2, max_epochs=10).budgets() == [2, 4, 8, 10]
    assert Rungs(grace_period=3, reduction_factor=3, max_epochs=3).budgets() == [3]


def test_successive_halving_promotes_the_best_third_of_a_rung() -> None:
    dimensions = space_parse(space={"learning_rate": {"low": 1e-4, "high": 1e-1, "log": True}})
    rungs = Rungs(grace_period=1, reduction_factor=3, max_epochs=9)
    values = [0.50, 0.40, 0.30, 0.90, 0.20, 0.10, 0.35, 0.95, 0.05]
    finished: list[TrialRecord] = []
    promoted = []
    for number, value in enumerate(values):
        params = {"learning_rate": 0.001 * (number + 1)}
        deciding = TrialRecord(number=number, params=params, values_by_epoch={1: value})
        if rung_promote(deciding=deciding, others=finished, dimensions=dimensions, rungs=rungs,
                        maximize=True):
            promoted.append(number)
        finished.append(TrialRecord(number=number, params=params, values_by_epoch={1: value},
                                    rung_values={0: value}))
    # The first is promoted alone (asynchronous halving); later ones only in the top third of
    # all that reached the rung by then.
    assert promoted == [0, 3, 7]
    minimizing = rung_promote(
        deciding=TrialRecord(number=9, params={"learning_rate": 0.01}, values_by_epoch={1: 0.01}),
        others=finished, dimensions=dimensions, rungs=rungs, maximize=False)
    assert minimizing


def test_a_trial_between_rungs_is_not_judged() -> None:
    dimensions = space_parse(space={"learning_rate": {"low": 1e-4, "high": 1e-1, "log": True}})
    rungs = Rungs(grace_period=2, reduction_factor=3, max_epochs=18)
    others = [TrialRecord(number=0, params={"learning_rate": 0.01}, values_by_epoch={2: 0.9},
                          rung_values={0: 0.9})] * 3
    early = TrialRecord(number=5, params={"learning_rate": 0.01}, values_by_epoch={1: 0.1})
    assert rung_promote(deciding=early, others=others, dimensions=dimensions, rungs=rungs,
                        maximize=True)
