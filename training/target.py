"""The metric a trial is judged by: which epoch is best, and when the target is reached.

`Target(metric="val_mae", mode="min", value=0.5)` reads "val_mae at or below 0.5". Without a
metric it is val_accuracy, maximised (what the platform's own classification compile reports).
An empty mode is chosen from the name, as Keras' callbacks do with mode="auto": losses and errors
are minimised, everything else maximised. No TensorFlow here: the web process validates targets.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from training.errors import InvalidInput

DEFAULT_METRIC = "val_accuracy"
MODES = ("min", "max")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,99}")
_MINIMISED = ("loss", "error", "mae", "mse", "rmse", "mape", "msle", "hinge", "crossentropy",
              "divergence", "perplexity")


def mode_infer(*, metric: str) -> str:
    name = metric.lower()
    return "min" if any(word in name for word in _MINIMISED) else "max"


@dataclass(frozen=True)
class Target:
    metric: str = DEFAULT_METRIC
    mode: str = "max"
    value: float | None = None

    def better(self, *, new: float, old: float | None) -> bool:
        if math.isnan(new):
            return False
        return old is None or (new < old if self.mode == "min" else new > old)

    def reached(self, *, value: float) -> bool:
        if self.value is None or math.isnan(value):
            return False
        return value <= self.value if self.mode == "min" else value >= self.value


def target_make(*, metric: str = "", mode: str = "", value: float | None = None) -> Target:
    """A validated target; InvalidInput names what is wrong."""
    metric = metric or DEFAULT_METRIC
    if not _NAME.fullmatch(metric):
        raise InvalidInput(
            f"target metric {metric!r} is not a metric name (letters, digits, _ and ., "
            "as Keras reports them: val_accuracy, val_mae, val_output_1_loss, ...)"
        )
    mode = mode or mode_infer(metric=metric)
    if mode not in MODES:
        raise InvalidInput(f"target mode must be min or max, got {mode!r}")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
            value
        ):
            raise InvalidInput(f"target value must be a finite number, got {value!r}")
        if metric.endswith("accuracy") and not 0 < value <= 1:
            raise InvalidInput(f"a target {metric} must be in (0, 1], got {value!r}")
    return Target(metric=metric, mode=mode, value=None if value is None else float(value))
