"""Order statistics for benchmark samples: medians over repeats, their confidence intervals,
latency percentiles."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


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


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    coverage: float  # the interval's exact confidence, at least the one asked for when reachable


def median_interval(samples: Sequence[float], *, confidence: float = 0.95) -> Interval:
    """A distribution-free confidence interval for the median: the k-th smallest to the k-th
    largest sample, with the largest k whose coverage, 1 - 2·P(Binomial(n, ½) < k), is at least
    `confidence`. With too few samples for that, the whole range and the coverage it has."""
    if not samples:
        raise ValueError("no samples")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} is outside (0, 1)")
    ordered = sorted(samples)
    n = len(ordered)

    def coverage(k: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= confidence:
        k += 1
    return Interval(low=ordered[k - 1], high=ordered[n - k], coverage=coverage(k))


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator ÷ denominator, or None when either side was not measured."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def steady(samples: Sequence[float], *, skip: int = 1) -> list[float]:
    """Drops the first `skip` samples (tracing, warm-up) when enough remain to say anything."""
    return list(samples[skip:]) if len(samples) > skip else list(samples)
