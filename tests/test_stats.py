import math

import pytest

from kbench.results import stats


def test_quantiles_match_hand_computed_values():
    xs = [4.0, 1.0, 3.0, 2.0]  # sorted 1 2 3 4
    assert stats.median(xs) == 2.5
    assert stats.quantile(xs, 0.25) == pytest.approx(1.75)
    assert stats.quantile(xs, 0.75) == pytest.approx(3.25)
    assert stats.quantile(xs, 0.0) == 1.0 and stats.quantile(xs, 1.0) == 4.0
    assert stats.median([5.0]) == 5.0


def test_mean_and_sample_stdev():
    xs = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    assert stats.mean(xs) == 5.0
    assert stats.stdev(xs) == pytest.approx(math.sqrt(32 / 7))
    assert stats.stdev([3.0]) == 0.0


def test_median_ci_uses_order_statistics():
    xs = [float(i) for i in range(1, 101)]  # n = 100: ranks 50 - 9.8 -> 40, 51 + 9.8 -> 61
    assert stats.median_ci(xs) == (40.0, 61.0)
    assert stats.median_ci_relative(xs) == pytest.approx(max(50.5 - 40, 61 - 50.5) / 50.5)


def test_median_ci_clamps_for_tiny_samples():
    assert stats.median_ci([1.0, 2.0, 3.0]) == (1.0, 3.0)


def test_summary_holds_every_statistic():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (s["n"], s["median"], s["min"], s["max"], s["q1"], s["q3"]) == (5, 3.0, 1.0, 100.0, 2.0, 4.0)
    assert s["mean"] == 22.0


def test_geometric_mean():
    assert stats.geometric_mean([1.0, 4.0, 16.0]) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        stats.geometric_mean([1.0, 0.0])


def test_empty_samples_are_an_error():
    for fn in (stats.median, stats.mean, stats.median_ci):
        with pytest.raises(ValueError):
            fn([])
