"""What a search tries next and which of its trials go on: Optuna decides, the platform runs.

Plain Python over plain dataclasses (no Django), so the benchmark runs the same decisions as the
platform. Nothing here keeps state between calls: the platform's database is the only record of
a search, and each decision rebuilds an in-memory Optuna study from it. That keeps a search
correct across web and worker processes and restarts without a second store to keep in step.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.pruners import SuccessiveHalvingPruner
from optuna.samplers import RandomSampler
from optuna.trial import TrialState, create_trial

from tfplatform.core.errors import InvalidInput

SEARCHERS = ("grid", "random", "adaptive")
MAX_GRID_POINTS = 10_000
MAX_CHOICES = 100
# Wider than any hyperparameter's bounds; keeps draws finite and ints within float precision.
MAX_MAGNITUDE = 1e12
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(frozen=True, kw_only=True)
class Dimension:
    """One hyperparameter's range: a list of values, or an int/float range (log-scaled or not;
    an int range with a step is also a grid axis)."""

    name: str
    kind: str  # "choice" | "int" | "float"
    values: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    step: int | None = None

    def distribution(self) -> BaseDistribution:
        if self.kind == "choice":
            return CategoricalDistribution(self.values)
        if self.kind == "int":
            return IntDistribution(int(self.low), int(self.high), log=self.log,
                                   step=self.step or 1)
        return FloatDistribution(self.low, self.high, log=self.log)

    def grid_values(self) -> list[Any]:
        if self.kind == "choice":
            return list(self.values)
        if self.kind == "int" and self.step is not None and not self.log:
            if (self.high - self.low) // self.step + 1 > MAX_GRID_POINTS:
                raise InvalidInput(f"space.{self.name}: its step gives more than "
                                   f"{MAX_GRID_POINTS} grid values.", field="space")
            return list(range(int(self.low), int(self.high) + 1, self.step))
        raise InvalidInput(
            f"A grid search needs a list of values for '{self.name}' (or an int range with a "
            "step); a continuous range has no grid.", field="space")

    def as_dict(self) -> dict[str, Any]:
        if self.kind == "choice":
            return {"values": list(self.values)}
        described: dict[str, Any] = {"type": self.kind, "low": self.low, "high": self.high}
        if self.kind == "int":
            described.update(low=int(self.low), high=int(self.high))
        if self.log:
            described["log"] = True
        if self.step is not None:
            described["step"] = self.step
        return described


def space_parse(*, space: Any) -> list[Dimension]:
    """The API's `space` ({name: {"values": [...]} | {"low", "high", "type"?, "log"?, "step"?}})
    as dimensions, or InvalidInput saying which entry is wrong and why."""
    if not isinstance(space, dict) or not space:
        raise InvalidInput("space must map at least one hyperparameter to its range.",
                           field="space")
    for name in space:
        if not NAME_PATTERN.fullmatch(str(name)):
            raise InvalidInput(f"space: {str(name)[:40]!r} is not a hyperparameter name "
                               "(letters, digits and _, up to 100).", field="space")
    # By name: PostgreSQL's JSON keeps no key order, and every listing should agree.
    return [_dimension_parse(name=str(name), entry=space[name]) for name in sorted(space)]


def _dimension_parse(*, name: str, entry: Any) -> Dimension:
    where = f"space.{name}"
    if not isinstance(entry, dict):
        raise InvalidInput(f"{where} must be an object with values, or low and high.",
                           field="space")
    unknown = set(entry) - {"values", "low", "high", "type", "log", "step"}
    if unknown:
        raise InvalidInput(f"{where} has unknown keys: {', '.join(sorted(unknown))}.",
                           field="space")
    if "values" in entry:
        values = entry["values"]
        if not isinstance(values, list) or not values or len(values) > MAX_CHOICES:
            raise InvalidInput(f"{where}.values must be a list of 1 to {MAX_CHOICES} values.",
                               field="space")
        if any(not isinstance(v, str | int | float | bool) or v is None for v in values):
            raise InvalidInput(f"{where}.values may hold only strings, numbers and booleans.",
                               field="space")
        if any(isinstance(v, int | float) and not isinstance(v, bool) and not (
                math.isfinite(v) and abs(v) <= MAX_MAGNITUDE) for v in values):
            raise InvalidInput(f"{where}.values: numbers must be within ±{MAX_MAGNITUDE:g}.",
                               field="space")
        if any(isinstance(v, str) and len(v) > 200 for v in values):
            raise InvalidInput(f"{where}.values: strings of at most 200 characters.",
                               field="space")
        if len(set(map(repr, values))) != len(values):
            raise InvalidInput(f"{where}.values repeats a value.", field="space")
        return Dimension(name=name, kind="choice", values=tuple(values))
    low, high = entry.get("low"), entry.get("high")
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high))
    if not numbers or not all(math.isfinite(float(v)) for v in (low, high)):  # type: ignore[arg-type]
        raise InvalidInput(f"{where} needs numbers low and high (or a list of values).",
                           field="space")
    if any(abs(float(v)) > MAX_MAGNITUDE for v in (low, high)):  # type: ignore[arg-type]
        raise InvalidInput(f"{where}: low and high must be within ±{MAX_MAGNITUDE:g}.",
                           field="space")
    kind = entry.get("type") or ("int" if isinstance(low, int) and isinstance(high, int)
                                 else "float")
    if kind not in ("int", "float"):
        raise InvalidInput(f"{where}.type must be int or float.", field="space")
    log = entry.get("log", False)
    step = entry.get("step")
    if not isinstance(log, bool):
        raise InvalidInput(f"{where}.log must be true or false.", field="space")
    if kind == "int" and not all(float(v).is_integer() for v in (low, high)):  # type: ignore[arg-type]
        raise InvalidInput(f"{where}: an int range needs whole numbers.", field="space")
    if not low < high:  # type: ignore[operator]
        raise InvalidInput(f"{where}: low must be below high.", field="space")
    if log and low <= 0:  # type: ignore[operator]
        raise InvalidInput(f"{where}: a log scale needs low > 0.", field="space")
    if step is not None and (kind != "int" or log or isinstance(step, bool)
                             or not isinstance(step, int) or step < 1):
        raise InvalidInput(f"{where}.step must be a positive int, on a linear int range.",
                           field="space")
    return Dimension(name=name, kind=kind, low=float(low), high=float(high),  # type: ignore[arg-type]
                     log=log, step=step)


def _grid(*, dimensions: list[Dimension]) -> Any:
    # Imported here: scikit-learn costs every process that loads the apps (web, nodes, the
    # scheduler) over a second of CPU at start, and only a grid search needs it.
    from sklearn.model_selection import ParameterGrid

    return ParameterGrid({d.name: d.grid_values() for d in dimensions})


def grid_size(*, dimensions: list[Dimension]) -> int:
    return len(_grid(dimensions=dimensions))


def configuration_sample(
    *, dimensions: list[Dimension], searcher: str, index: int, seed: int
) -> dict[str, Any]:
    """The hyperparameters of the search's `index`-th trial (0-based). Grid: that point of the
    product, in a fixed order; random and adaptive: Optuna's random sampler, seeded by the
    search's seed and the index, so the same search asks the same configurations again."""
    if searcher == "grid":
        grid = _grid(dimensions=dimensions)
        if index >= len(grid):
            raise InvalidInput("The grid has no more points.")
        point = grid[index]
        return {d.name: point[d.name] for d in dimensions}
    study = optuna.create_study(sampler=RandomSampler(seed=_trial_seed(seed=seed, index=index)))
    asked = study.ask({d.name: d.distribution() for d in dimensions})
    return {d.name: asked.params[d.name] for d in dimensions}


def _trial_seed(*, seed: int, index: int) -> int:
    digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


@dataclass(frozen=True, kw_only=True)
class Rungs:
    """Successive halving's schedule: trials train `grace_period` epochs, then the best
    1/`reduction_factor` of those that reached a rung go on to `reduction_factor` times as
    many, up to `max_epochs`."""

    grace_period: int
    reduction_factor: int
    max_epochs: int

    def budgets(self) -> list[int]:
        budgets, epochs = [], self.grace_period
        while epochs < self.max_epochs:
            budgets.append(epochs)
            epochs *= self.reduction_factor
        return [*budgets, self.max_epochs]


def rungs_check(*, grace_period: int, reduction_factor: int, max_epochs: int) -> Rungs:
    if grace_period < 1:
        raise InvalidInput("grace_period must be at least 1 epoch.", field="grace_period")
    if reduction_factor < 2:
        raise InvalidInput("reduction_factor must be at least 2.", field="reduction_factor")
    if max_epochs < grace_period:
        raise InvalidInput("max_epochs must be at least grace_period.", field="max_epochs")
    return Rungs(grace_period=grace_period, reduction_factor=reduction_factor,
                 max_epochs=max_epochs)


@dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """What a decision needs of one trial of the search: its metric by epoch (1-based) and the
    value it had at each rung it completed."""

    number: int
    params: dict[str, Any]
    values_by_epoch: dict[int, float] = field(default_factory=dict)
    rung_values: dict[int, float] = field(default_factory=dict)


def rung_promote(
    *,
    deciding: TrialRecord,
    others: list[TrialRecord],
    dimensions: list[Dimension],
    rungs: Rungs,
    maximize: bool,
) -> bool:
    """Whether a trial that just finished its rung's epochs goes on to the next rung (ASHA:
    among every trial that reached this rung so far, it is in the best 1/reduction_factor).

    Optuna's SuccessiveHalvingPruner decides, over a study rebuilt from the records; the rung
    is the one the trial's last epoch ends.
    """
    study = optuna.create_study(direction="maximize" if maximize else "minimize")
    distributions = {d.name: d.distribution() for d in dimensions}
    for record in others:
        study.add_trial(create_trial(
            state=TrialState.PRUNED, params=record.params, distributions=distributions,
            intermediate_values=dict(record.values_by_epoch),
            system_attrs={f"completed_rung_{r}": v for r, v in record.rung_values.items()},
        ))
    study.add_trial(create_trial(
        state=TrialState.RUNNING, params=deciding.params, distributions=distributions,
        intermediate_values=dict(deciding.values_by_epoch),
        system_attrs={f"completed_rung_{r}": v for r, v in deciding.rung_values.items()},
    ))
    frozen = study.get_trials(deepcopy=False)[-1]
    pruner = SuccessiveHalvingPruner(
        min_resource=rungs.grace_period, reduction_factor=rungs.reduction_factor,
        min_early_stopping_rate=0,
    )
    return not pruner.prune(study, frozen)
