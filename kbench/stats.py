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
