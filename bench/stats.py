"""Order statistics for benchmark samples: medians over repeats, latency percentiles."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), interpolated between closest ranks (numpy's default)."""
    if not samples:
        raise ValueError("no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(samples: Sequence[float]) -> float:
    if not samples:
        raise ValueError("no samples")
    return float(statistics.median(samples))


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator ÷ denominator, or None when either side was not measured."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def steady(samples: Sequence[float], *, skip: int = 1) -> list[float]:
    """Drops the first `skip` samples (tracing, warm-up) when enough remain to say anything."""
    return list(samples[skip:]) if len(samples) > skip else list(samples)
