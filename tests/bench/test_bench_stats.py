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
