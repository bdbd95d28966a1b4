"""Rates and quantiles from cumulative scrapes, as Prometheus computes them."""

from datetime import UTC, datetime, timedelta

import pytest

from tfplatform.modelregistry.health import (
    WHOLE_MODEL,
    Counts,
    health_compute,
    quantile,
    scrape_parse,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)

L = ":tensorflow:serving:request_latency"
TEXT = f"""# TYPE :tensorflow:serving:request_count counter
:tensorflow:serving:request_count{{model_name="m",status="OK"}} 17
:tensorflow:serving:request_count{{model_name="m",status="INVALID_ARGUMENT"}} 2
:tensorflow:serving:request_count{{model_name="m",status="NOT_FOUND"}} 1
# TYPE :tensorflow:serving:request_latency histogram
{L}_bucket{{API="Classify",entrypoint="GRPC",model_name="m",le="10"}} 1
{L}_bucket{{API="Classify",entrypoint="GRPC",model_name="m",le="18"}} 4
{L}_bucket{{API="Classify",entrypoint="GRPC",le="+Inf",model_name="m"}} 4
{L}_count{{API="Classify",entrypoint="GRPC",model_name="m"}} 4
{L}_sum{{API="Classify",entrypoint="GRPC",model_name="m"}} 50
{L}_bucket{{API="Classify",entrypoint="REST",model_name="m",le="10"}} 0
{L}_bucket{{API="Classify",entrypoint="REST",model_name="m",le="18"}} 6
{L}_bucket{{API="Classify",entrypoint="REST",model_name="m",le="+Inf"}} 6
{L}_count{{API="Classify",entrypoint="REST",model_name="m"}} 6
{L}_bucket{{API="",entrypoint="REST",model_name="m",le="10"}} 7
{L}_bucket{{API="",entrypoint="REST",model_name="m",le="+Inf"}} 7
{L}_count{{API="",entrypoint="REST",model_name="m"}} 7
"""


def test_scrape_sums_statuses_and_entrypoints_but_not_status_reads() -> None:
    counts = scrape_parse(TEXT)[("m", None)]  # the 7 calls without an API are status reads
    assert (counts.ok, counts.failed) == (10, 3)
    assert counts.buckets == (("10", 1), ("18", 10), ("+Inf", 10))


V = ":tfplatform:serving:request_latency"
VERSIONED = TEXT + f"""# TYPE :tfplatform:serving:request_count counter
:tfplatform:serving:request_count{{model_name="m",model_version="1",status="OK"}} 3
:tfplatform:serving:request_count{{model_name="m",model_version="2",status="OK"}} 7
:tfplatform:serving:request_count{{model_name="m",model_version="2",status="INTERNAL"}} 2
:tfplatform:serving:request_count{{model_name="m",model_version="x",status="INTERNAL"}} 9
# TYPE :tfplatform:serving:request_latency histogram
{V}_bucket{{API="Predict",entrypoint="GRPC",model_name="m",model_version="1",le="10"}} 3
{V}_bucket{{API="Predict",entrypoint="GRPC",model_name="m",model_version="1",le="+Inf"}} 3
{V}_count{{API="Predict",entrypoint="GRPC",model_name="m",model_version="1"}} 3
{V}_bucket{{API="predict",entrypoint="REST",model_name="m",model_version="2",le="10"}} 0
{V}_bucket{{API="predict",entrypoint="REST",model_name="m",model_version="2",le="+Inf"}} 7
{V}_count{{API="predict",entrypoint="REST",model_name="m",model_version="2"}} 7
"""


def test_versions_are_parsed_beside_the_whole_model() -> None:
    counts = scrape_parse(VERSIONED)
    assert set(counts) == {("m", WHOLE_MODEL), ("m", 1), ("m", 2)}  # "x" is no version
    assert (counts[("m", WHOLE_MODEL)].ok, counts[("m", WHOLE_MODEL)].failed) == (10, 3)
    assert (counts[("m", 1)].ok, counts[("m", 1)].failed) == (3, 0)
    assert counts[("m", 2)] == Counts(ok=7, failed=2, buckets=(("10", 0), ("+Inf", 7)))


def test_rates_and_quantiles_from_deltas() -> None:
    before = Counts(ok=100, failed=5, buckets=(("10", 50), ("20", 100), ("+Inf", 100)))
    after = Counts(ok=190, failed=15, buckets=(("10", 50), ("20", 140), ("+Inf", 190)))
    health = health_compute([(T0, before), (T0 + timedelta(seconds=50), after)])
    assert health is not None
    assert (health.requests, health.failed) == (100, 10)
    assert health.request_rate == pytest.approx(2.0)
    assert health.error_rate == pytest.approx(0.1)
    # 90 new observations: 40 in (10, 20], 50 above 20 µs; the median is the 45th, above 20.
    assert health.p50_ms == pytest.approx(0.020)
    assert health.p99_ms == pytest.approx(0.020)


def test_a_restart_counts_from_zero() -> None:
    samples = [
        (T0, Counts(ok=50, buckets=(("10", 50), ("+Inf", 50)))),
        (T0 + timedelta(seconds=10), Counts(ok=60, buckets=(("10", 60), ("+Inf", 60)))),
        (T0 + timedelta(seconds=20), Counts(ok=5, buckets=(("10", 5), ("+Inf", 5)))),
    ]
    health = health_compute(samples)
    assert health is not None
    assert health.requests == 15
    assert health.error_rate == 0
    assert health.p50_ms == pytest.approx(0.005)  # interpolated in the first bucket


def test_quantile_interpolates_within_a_bucket() -> None:
    assert quantile(0.5, [(10.0, 0.0), (20.0, 10.0), (float("inf"), 10.0)]) == 15.0
    assert quantile(0.5, []) is None
    assert quantile(0.5, [(10.0, 0.0), (float("inf"), 0.0)]) is None
    assert health_compute([(T0, Counts())]) is None
