"""Pure statistics over raw timing samples: order statistics, confidence intervals, summaries."""

from __future__ import annotations

import math
from collections.abc import Sequence

Z_95 = 1.959963984540054  # two-sided 95% quantile of the standard normal


def quantile(samples: Sequence[float], q: float) -> float:
    """Quantile with linear interpolation between order statistics (numpy's default method)."""
    if not samples:
        raise ValueError("quantile of no samples")
    xs = sorted(samples)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(samples: Sequence[float]) -> float:
    return quantile(samples, 0.5)


def mean(samples: Sequence[float]) -> float:
    if not samples:
        raise ValueError("mean of no samples")
    return math.fsum(samples) / len(samples)


def stdev(samples: Sequence[float]) -> float:
    """Sample standard deviation (n - 1 in the denominator); 0 for fewer than two samples."""
    if len(samples) < 2:
        return 0.0
    m = mean(samples)
    return math.sqrt(math.fsum((x - m) ** 2 for x in samples) / (len(samples) - 1))


def median_ci(samples: Sequence[float], z: float = Z_95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics.

    The number of samples below the true median is Binomial(n, 1/2); its normal approximation puts
    the interval's ends at ranks (n - z*sqrt(n)) / 2 and 1 + (n + z*sqrt(n)) / 2 (1-based, clamped).
    No assumption about the shape of the timing distribution is made.
    """
    if not samples:
        raise ValueError("confidence interval of no samples")
    xs = sorted(samples)
    n = len(xs)
    half = z * math.sqrt(n) / 2
    lo_rank = max(1, math.floor(n / 2 - half))
    hi_rank = min(n, math.ceil(n / 2 + 1 + half))
    return xs[lo_rank - 1], xs[hi_rank - 1]


def median_ci_relative(samples: Sequence[float], z: float = Z_95) -> float:
    """Largest distance from the median to an end of its confidence interval, relative to the median."""
    med = median(samples)
    lo, hi = median_ci(samples, z)
    if med <= 0:
        return math.inf
    return max(med - lo, hi - med) / med


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """The statistics kept next to the raw samples in result files (all in the samples' unit)."""
    lo, hi = median_ci(samples)
    return {
        "n": len(samples),
        "median": median(samples),
        "mean": mean(samples),
        "std": stdev(samples),
        "min": min(samples),
        "q1": quantile(samples, 0.25),
        "q3": quantile(samples, 0.75),
        "max": max(samples),
        "ci_low": lo,
        "ci_high": hi,
    }


def geometric_mean(values: Sequence[float]) -> float:
    if not values or any(v <= 0 for v in values):
        raise ValueError("geometric mean needs positive values")
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) of values, and the sizes of tied groups."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test: (U of a, p-value), normal approximation with tie and continuity
    corrections. It asks whether values of one sample tend to be larger, assuming nothing about their
    distribution, which suits skewed timing samples. Identical samples give p = 1.
    """
    if not a or not b:
        raise ValueError("Mann-Whitney U needs two non-empty samples")
    n1, n2 = len(a), len(b)
    ranks, ties = _ranks(list(a) + list(b))
    u1 = math.fsum(ranks[:n1]) - n1 * (n1 + 1) / 2
    n = n1 + n2
    tie_term = math.fsum(t**3 - t for t in ties) / (n * (n - 1)) if n > 1 else 0.0
    variance = n1 * n2 / 12 * ((n + 1) - tie_term)
    if variance <= 0:
        return u1, 1.0
    mu = n1 * n2 / 2
    z = (abs(u1 - mu) - 0.5) / math.sqrt(variance)
    return u1, min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))
