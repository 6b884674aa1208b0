"""Strip-and-box charts of raw timing samples, as geometry for an inline SVG (the HTML report draws it)."""

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


@dataclass(frozen=True)
class Strip:
    """One row of the chart: a box (quartiles), a whisker (min to max), the median and the thinned samples."""

    label: str
    kind: str  # a CSS class: reference, correct, suspect, failed, before, or a compare change
    n: int
    y: float
    lo: float  # x of min
    q1: float
    median: float
    q3: float
    hi: float  # x of max
    dots: str  # an SVG path: one zero-length segment per drawn sample, drawn with round caps
    title: str  # hover text: median and quartiles in the chart's unit


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


def thin(samples: Sequence[float], k: int = MAX_DOTS) -> list[float]:
    """At most k samples, sorted: evenly spaced order statistics keep the distribution's shape."""
    xs = sorted(samples)
    if len(xs) <= k:
        return xs
    return [xs[round(i * (len(xs) - 1) / (k - 1))] for i in range(k)]


def _unit(largest_s: float) -> tuple[str, float]:
    return next((name, scale) for below, name, scale in UNITS if largest_s < below)


def linear_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round values (1, 2 or 5 times a power of ten apart) from lo to hi."""
    raw = (hi - lo) / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = magnitude * next(m for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step)
    return [i * step for i in range(first, math.floor(hi / step) + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten from lo to hi, and 2x and 5x them when fewer than three decades show."""
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    ticks = [10.0**d for d in decades if lo <= 10.0**d <= hi]
    if len(ticks) < 3:
        ticks = sorted(m * 10.0**d for d in decades for m in (1, 2, 5) if lo <= m * 10.0**d <= hi)
    return ticks


def _label(value: float) -> str:
    return f"{value:.3g}"


def _range(values: Sequence[float], log: bool) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if log:
        return lo / 1.15, hi * 1.15
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    return max(0.0, lo - pad) if lo >= 0 else lo - pad, hi + pad


def chart(rows: Sequence[tuple[str, str, Sequence[float]]]) -> Chart | None:
    """The chart of rows (label, kind, samples in seconds), one strip each; None when no row has samples."""
    rows = [(label, kind, samples) for label, kind, samples in rows if samples]
    if not rows:
        return None
    every = [v for _, _, samples in rows for v in samples]
    unit, scale = _unit(max(every))
    log = min(every) > 0 and max(every) / min(every) > LOG_SCALE_SPREAD
    lo, hi = _range([v * scale for v in every], log)
    to = (lambda v: math.log10(v)) if log else (lambda v: v)
    span = to(hi) - to(lo)

    def x(seconds: float) -> float:
        return round(LEFT + (to(seconds * scale) - to(lo)) / span * (WIDTH - LEFT - RIGHT), 1)

    strips = tuple(_strip(label, kind, samples, TOP + ROW * (i + 0.5), x, unit, scale)
                   for i, (label, kind, samples) in enumerate(rows))
    ticks = tuple((x(t / scale), _label(t)) for t in (log_ticks(lo, hi) if log else linear_ticks(lo, hi)))
    axis_y = TOP + ROW * len(rows)
    return Chart(WIDTH, int(axis_y + AXIS), LEFT, unit, log, ticks, strips, axis_y)


def _strip(label: str, kind: str, samples: Sequence[float], y: float, x: Callable[[float], float], unit: str,
           scale: float) -> Strip:
    jitter = ROW * 0.28
    dots = "".join(f"M{x(v)} {round(y + jitter * (((i * 7) % 11) - 5) / 5, 1)}h0" for i, v in enumerate(thin(samples)))
    q = {name: quantile(samples, p) for name, p in (("min", 0), ("q1", 0.25), ("median", 0.5), ("q3", 0.75), ("max", 1))}
    title = (f"{label}: median {_label(q['median'] * scale)} {unit}, quartiles {_label(q['q1'] * scale)}-"
             f"{_label(q['q3'] * scale)} {unit}, range {_label(q['min'] * scale)}-{_label(q['max'] * scale)} {unit}, "
             f"{len(samples)} samples")
    short = label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"
    return Strip(short, kind, len(samples), y, x(q["min"]), x(q["q1"]), x(q["median"]), x(q["q3"]), x(q["max"]),
                 dots, title)
