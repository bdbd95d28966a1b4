"""The statistics every benchmark figure goes through."""

import pytest

from bench import stats


def test_percentile_interpolates_between_closest_ranks() -> None:
    samples = [4.0, 1.0, 3.0, 2.0]  # unsorted on purpose
    assert stats.percentile(samples, 0) == 1.0
    assert stats.percentile(samples, 100) == 4.0
    assert stats.percentile(samples, 50) == 2.5
    assert stats.percentile(samples, 99) == pytest.approx(3.97)
    assert stats.percentile([7.0], 99) == 7.0


def test_percentile_and_median_refuse_what_cannot_be_answered() -> None:
    with pytest.raises(ValueError, match="no samples"):
        stats.percentile([], 50)
    with pytest.raises(ValueError, match="outside"):
        stats.percentile([1.0], 101)
    with pytest.raises(ValueError, match="no samples"):
        stats.median([])


def test_ratio_is_none_when_a_side_was_not_measured() -> None:
    assert stats.ratio(3.0, 2.0) == 1.5
    assert stats.ratio(None, 2.0) is None
    assert stats.ratio(3.0, None) is None
    assert stats.ratio(3.0, 0.0) is None


def test_steady_drops_the_warm_up_only_when_something_remains() -> None:
    assert stats.steady([100.0, 5.0, 6.0]) == [5.0, 6.0]
    assert stats.steady([100.0]) == [100.0]
    assert stats.steady([9.0, 8.0, 1.0, 2.0], skip=2) == [1.0, 2.0]


def test_median_interval_takes_the_order_statistics_binomial_coverage_allows() -> None:
    # n = 12: P(B(12, ½) <= 2) = 79/4096, so samples 3 and 10 cover 96.1 %; 4 and 9 only 85.4 %.
    interval = stats.median_interval([float(v) for v in range(12, 0, -1)])
    assert (interval.low, interval.high) == (3.0, 10.0)
    assert interval.coverage == pytest.approx(1 - 2 * 79 / 4096)
    # n = 7: the 2nd and 6th cover 1 - 2·8/128 = 87.5 %; the range, 98.4 %, is what reaches 95 %.
    interval = stats.median_interval([5.0, 1.0, 7.0, 3.0, 2.0, 6.0, 4.0])
    assert (interval.low, interval.high) == (1.0, 7.0)
    assert interval.coverage == pytest.approx(1 - 2 / 128)
    assert stats.median_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], confidence=0.8).low == 2.0


def test_median_interval_with_too_few_samples_is_the_range_at_its_own_coverage() -> None:
    interval = stats.median_interval([2.0, 1.0, 3.0])
    assert (interval.low, interval.high) == (1.0, 3.0)
    assert interval.coverage == pytest.approx(0.75)
    with pytest.raises(ValueError, match="no samples"):
        stats.median_interval([])
    with pytest.raises(ValueError, match="outside"):
        stats.median_interval([1.0], confidence=1.0)
