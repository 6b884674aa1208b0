"""Strip-and-box charts of raw timing samples, as geometry for an inline SVG (the HTML report draws it).

The axis is chosen so that distances on it can be read:

- Context, not zoom: the axis always spans at least ±CONTEXT (5%) around the median of the rows' medians, so two
  rows 0.2% apart are drawn 0.2% of a ≥10%-wide axis apart (under 2% of its width), never as a large gap. The axis
  stays absolute (times in µs, ms or s); it is not relabelled in percent.
- Robust range: the axis covers the samples within Tukey's far-out fences of some row (from the lowest q1 - 3 IQR to
  the highest q3 + 3 IQR), plus the context above, plus a 5% margin. Samples beyond it are clipped: drawn at the
  axis edge with a chevron beside them, counted in the strip's clipped_low / clipped_high, and told in its title,
  so one outlier 100x the rest does not squash every row into a corner.
- A log axis only when the robust range itself spans more than LOG_SCALE_SPREAD (an outlier alone never makes one).
- Tick labels carry as many decimals as the tick step needs (step 0.2: one decimal, 0.05: two), so adjacent labels
  always differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kbench.reports.leaderboard import LOG_SCALE_SPREAD
from kbench.results.stats import quantile

WIDTH, LEFT, RIGHT = 760, 180, 16  # px of the SVG's coordinate system; LEFT holds the row labels
ROW, TOP, AXIS = 26, 6, 30  # a strip's height, the space above the first and below the last (the axis)
MAX_DOTS = 60  # samples drawn per strip: evenly spaced order statistics, so a 5000-sample row stays a few KB
LABEL_CHARS = 28
UNITS = ((1e-3, "µs", 1e6), (1.0, "ms", 1e3), (math.inf, "s", 1.0))  # (below this many seconds, unit, scale)
CONTEXT = 0.05  # the axis spans at least this share below and above the median of the rows' medians
FENCE = 3.0  # IQRs beyond a row's quartiles that still count as its range (Tukey's far-out fences)
MARGIN = 0.05  # share of the span added at each end (a factor of 1.15 on a log axis)
QUANTILES = (("min", 0.0), ("q1", 0.25), ("median", 0.5), ("q3", 0.75), ("max", 1.0))


@dataclass(frozen=True)
class Strip:
    """One row of the chart: a box (quartiles), a whisker (min to max), the median and the thinned samples.

    Positions are clamped to the axis; samples beyond it lie at its edge, and `dots` then also holds a chevron
    pointing off the axis beside them (the whisker stops at the last sample on the axis)."""

    label: str
    kind: str  # a CSS class: reference, correct, suspect, failed, before, or a compare change
    n: int
    y: float
    lo: float  # x of the least sample on the axis (the min, unless clipped)
    q1: float
    median: float
    q3: float
    hi: float  # x of the greatest sample on the axis (the max, unless clipped)
    dots: str  # an SVG path: one zero-length segment per drawn sample, drawn with round caps (and clip chevrons)
    title: str  # hover text: median and quartiles in the chart's unit, and the clipped samples
    clipped_low: int = 0  # samples below the axis' low end, drawn at its edge
    clipped_high: int = 0  # samples above the axis' high end, drawn at its edge


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    left: int
    unit: str
    log: bool
    ticks: tuple[tuple[float, str], ...]  # (x, label)
    strips: tuple[Strip, ...]
    axis_y: float
    low: float = 0.0  # the axis' ends, in the chart's unit
    high: float = 0.0


def thin(samples: Sequence[float], k: int = MAX_DOTS) -> list[float]:
    """At most k samples, sorted: evenly spaced order statistics keep the distribution's shape."""
    xs = sorted(samples)
    if len(xs) <= k:
        return xs
    return [xs[round(i * (len(xs) - 1) / (k - 1))] for i in range(k)]


def _unit(largest_s: float) -> tuple[str, float]:
    return next((name, scale) for below, name, scale in UNITS if largest_s < below)


def linear_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round values from lo to hi, about `target` steps apart: the step is 1, 2 or 5 times a power of ten."""
    raw = (hi - lo) / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = magnitude * min((1, 2, 5, 10), key=lambda m: abs(math.log(m * magnitude / raw)))
    first = math.ceil(lo / step)
    return [i * step for i in range(first, math.floor(hi / step) + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten from lo to hi, and 2x and 5x them when fewer than three decades show."""
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    ticks = [10.0**d for d in decades if lo <= 10.0**d <= hi]
    if len(ticks) < 3:
        ticks = sorted(m * 10.0**d for d in decades for m in (1, 2, 5) if lo <= m * 10.0**d <= hi)
    return ticks


def decimals(step: float) -> int:
    """Decimals that tell apart values `step` apart when step is 1, 2 or 5 times a power of ten (0.2: 1, 0.05: 2)."""
    return max(0, -math.floor(math.log10(abs(step)) + 1e-6)) if step else 0


def tick_labels(ticks: Sequence[float], log: bool) -> list[str]:
    """Labels of ticks: on a linear axis all with the decimals of the step, on a log axis each with its own."""
    if log:
        return [f"{t:.{decimals(t)}f}" for t in ticks]
    places = decimals(ticks[1] - ticks[0]) if len(ticks) > 1 else decimals(ticks[0]) if ticks else 0
    return [f"{t:.{places}f}" for t in ticks]


def value_label(value: float, places: int | None) -> str:
    """A value for hover text: `places` decimals, trailing zeros dropped (None: 4 significant digits)."""
    if places is None:
        return f"{value:.4g}"
    return f"{value:.{places}f}".rstrip("0").rstrip(".") if places else f"{value:.0f}"


def axis_range(quartiles: Sequence[dict[str, float]]) -> tuple[float, float, bool]:
    """(low, high, log) of the axis for rows' quantiles (in the chart's unit): see the module's docstring."""
    low = max(min(q["min"] for q in quartiles), min(q["q1"] - FENCE * (q["q3"] - q["q1"]) for q in quartiles))
    high = min(max(q["max"] for q in quartiles), max(q["q3"] + FENCE * (q["q3"] - q["q1"]) for q in quartiles))
    log = low > 0 and high / low > LOG_SCALE_SPREAD
    if log:
        return low / (1 + 3 * MARGIN), high * (1 + 3 * MARGIN), True
    middle = quantile([q["median"] for q in quartiles], 0.5)
    low, high = min(low, middle * (1 - CONTEXT)), max(high, middle * (1 + CONTEXT))
    pad = (high - low) * MARGIN or 1e-9  # zero only when every sample is zero
    return (max(0.0, low - pad) if low >= 0 else low - pad), high + pad, False


def chart(rows: Sequence[tuple[str, str, Sequence[float]]]) -> Chart | None:
    """The chart of rows (label, kind, samples in seconds), one strip each; None when no row has samples."""
    rows = [(label, kind, samples) for label, kind, samples in rows if samples]
    if not rows:
        return None
    quartiles = [{name: quantile(samples, p) for name, p in QUANTILES} for _, _, samples in rows]
    lo, hi, log = axis_range(quartiles)  # in seconds; the unit fits the axis, not an outlier beyond it
    unit, scale = _unit(hi)
    quartiles = [{name: v * scale for name, v in q.items()} for q in quartiles]
    lo, hi = lo * scale, hi * scale
    to = math.log10 if log else (lambda v: v)
    span = to(hi) - to(lo)

    def x(value: float) -> float:
        """x of a value in the chart's unit, clamped to the axis."""
        return round(LEFT + (to(min(max(value, lo), hi)) - to(lo)) / span * (WIDTH - LEFT - RIGHT), 1)

    places = None if log else decimals((hi - lo) / 1000)  # hover text: three digits finer than the axis' span
    strips = tuple(_strip(label, kind, [v * scale for v in samples], q, TOP + ROW * (i + 0.5), x, (lo, hi),
                          f" {unit}", lambda v: value_label(v, places))
                   for i, ((label, kind, samples), q) in enumerate(zip(rows, quartiles)))
    values = log_ticks(lo, hi) if log else linear_ticks(lo, hi)
    ticks = tuple(zip((x(t) for t in values), tick_labels(values, log)))
    axis_y = TOP + ROW * len(rows)
    return Chart(WIDTH, int(axis_y + AXIS), LEFT, unit, log, ticks, strips, axis_y, lo, hi)


def _chevrons(y: float, low: int, high: int) -> str:
    """Path segments of a chevron pointing off the axis beside the samples clipped at either edge."""
    marks = f"M{LEFT + 7} {round(y - 4, 1)}l-4 4l4 4" if low else ""
    return marks + (f"M{WIDTH - RIGHT - 7} {round(y - 4, 1)}l4 4l-4 4" if high else "")


def _strip(label: str, kind: str, values: Sequence[float], q: dict[str, float], y: float,
           x: Callable[[float], float], ends: tuple[float, float], unit: str, fmt: Callable[[float], str]) -> Strip:
    """A row's strip from its samples in the chart's unit; the whisker runs over the samples on the axis."""
    jitter = ROW * 0.28
    dots = "".join(f"M{x(v)} {round(y + jitter * (((i * 7) % 11) - 5) / 5, 1)}h0" for i, v in enumerate(thin(values)))
    low, high = sum(v < ends[0] for v in values), sum(v > ends[1] for v in values)
    shown = [v for v in values if ends[0] <= v <= ends[1]] or [q["median"]]
    title = (f"{label}: median {fmt(q['median'])}{unit}, quartiles {fmt(q['q1'])}-{fmt(q['q3'])}{unit}, "
             f"range {fmt(q['min'])}-{fmt(q['max'])}{unit}, {len(values)} samples")
    clipped = [f"{n} sample{'s' * (n > 1)} {side} {fmt(end)}{unit}"
               for n, side, end in ((low, "below", ends[0]), (high, "above", ends[1])) if n]
    if clipped:
        title += f"; clipped to the axis edge: {', '.join(clipped)}"
    short = label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"
    return Strip(short, kind, len(values), y, x(min(shown)), x(q["q1"]), x(q["median"]), x(q["q3"]), x(max(shown)),
                 dots + _chevrons(y, low, high), title, low, high)
