"""Serving health from the model server's Prometheus endpoint: parsing a scrape into
cumulative counts per model, and rates and quantiles from the differences between scrapes
(as Prometheus' rate() and histogram_quantile() compute them, counter resets included)."""

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from prometheus_client.parser import text_string_to_metric_families

REQUEST_COUNT = ":tensorflow:serving:request_count"
REQUEST_LATENCY = ":tensorflow:serving:request_latency"
# The embedded model server's per-version repeats of the two (serving/metrics.py).
VERSION_REQUEST_COUNT = ":tfplatform:serving:request_count"
VERSION_REQUEST_LATENCY = ":tfplatform:serving:request_latency"
# The key of a whole model's counts, beside its versions'.
WHOLE_MODEL = None


@dataclass(frozen=True)
class Counts:
    """One model's cumulative counts at one scrape."""

    ok: float = 0.0
    failed: float = 0.0
    buckets: tuple[tuple[str, float], ...] = ()  # (le, cumulative count), in bound order


@dataclass(frozen=True)
class Health:
    window_seconds: float
    requests: float
    failed: float  # requests that did not succeed
    request_rate: float  # per second
    error_rate: float | None  # the failed share of requests; None without requests
    p50_ms: float | None  # of succeeded requests (TF Serving times only those)
    p99_ms: float | None


def _le(bound: str) -> float:
    return math.inf if bound == "+Inf" else float(bound)


def scrape_parse(text: str) -> dict[tuple[str, int | None], Counts]:
    """{(model name, version or WHOLE_MODEL): its counts} from the exposition text. Succeeded
    requests and their latency come from request_latency, leaving out what has no API (REST
    status and metadata reads, such as the model loader's polls); failed ones from
    request_count, which has no API label, so a failed read of the model's status counts too.
    Versions are there only when the server reports them (the embedded one does)."""
    ok: dict[tuple[str, int | None], float] = {}
    failed: dict[tuple[str, int | None], float] = {}
    buckets: dict[tuple[str, int | None], dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name in (REQUEST_COUNT, REQUEST_LATENCY):
            versioned = False
        elif family.name in (VERSION_REQUEST_COUNT, VERSION_REQUEST_LATENCY):
            versioned = True
        else:
            continue
        for sample in family.samples:
            key = _key(sample.labels, versioned=versioned)
            if key is None:
                continue
            if family.name in (REQUEST_COUNT, VERSION_REQUEST_COUNT):
                if sample.labels.get("status") != "OK":
                    failed[key] = failed.get(key, 0.0) + sample.value
            elif sample.labels.get("API"):
                if sample.name.endswith("_count"):
                    ok[key] = ok.get(key, 0.0) + sample.value
                elif sample.name.endswith("_bucket"):
                    cells = buckets.setdefault(key, {})
                    bound = sample.labels["le"]
                    cells[bound] = cells.get(bound, 0.0) + sample.value
    return {
        key: Counts(
            ok=ok.get(key, 0.0), failed=failed.get(key, 0.0),
            buckets=tuple(sorted(buckets.get(key, {}).items(), key=lambda b: _le(b[0]))),
        )
        for key in set(ok) | set(failed) | set(buckets)
    }


def _key(labels: dict[str, str], *, versioned: bool) -> tuple[str, int | None] | None:
    model = labels.get("model_name")
    if model is None:
        return None
    if not versioned:
        return model, WHOLE_MODEL
    version = labels.get("model_version", "")
    return (model, int(version)) if version.isdecimal() and int(version) > 0 else None


def _increase(values: Sequence[float]) -> float:
    """A counter's increase over a series: a drop means the server restarted from zero."""
    total = 0.0
    for before, after in itertools.pairwise(values):
        total += after - before if after >= before else after
    return total


def quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """histogram_quantile over (upper bound, cumulative count) pairs, interpolating linearly
    within a bucket; None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower  # the overflow bucket: its lower edge is all that is known
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower


def health_compute(samples: Sequence[tuple[datetime, Counts]]) -> Health | None:
    """Health over consecutive samples (oldest first); None with fewer than two."""
    if len(samples) < 2:
        return None
    seconds = (samples[-1][0] - samples[0][0]).total_seconds()
    ok = _increase([counts.ok for _, counts in samples])
    failed = _increase([counts.failed for _, counts in samples])
    bounds = sorted({le for _, counts in samples for le, _ in counts.buckets}, key=_le)
    increases = []
    for bound in bounds:
        series = [dict(counts.buckets).get(bound, 0.0) for _, counts in samples]
        increases.append((_le(bound), _increase(series)))
    requests = ok + failed
    p50, p99 = quantile(0.5, increases), quantile(0.99, increases)
    return Health(
        window_seconds=seconds,
        requests=requests,
        failed=failed,
        request_rate=requests / seconds if seconds > 0 else 0.0,
        error_rate=failed / requests if requests else None,
        p50_ms=p50 / 1000 if p50 is not None else None,
        p99_ms=p99 / 1000 if p99 is not None else None,
    )
