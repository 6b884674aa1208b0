"""A problem's speedups vs eager as an inline SVG: one horizontal bar per solution on a log axis.

A speedup is a ratio, so the axis is logarithmic: 2x and 0.5x lie the same distance right and left of the 1x line,
and each bar runs from that line to its value (faster to the right, slower to the left), with the speedup's interval
as a whisker. The axis always shows at least 0.5x-2x, so values near 1 are never blown up into a large difference.
A bar whose interval reaches the noise band ABOUT_ONE (0.97-1.03, as kbench.results.speedups' NOISE_BAND) is not told
apart from 1x: it gets the neutral class "about-one"; a correct row wholly below the band is a slowdown, "slower", in
its own colour, never the green of a win. `speedup_chart` gives the geometry, `speedup_svg` draws it as a
self-contained <svg> (presentation attributes, no style sheet, no script, no external resource); its classes (bar,
whisker, one, grid-line, axis, and each bar's kind) let a page's CSS restyle it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import escape

WIDTH, LEFT, RIGHT = 760, 180, 64  # px; LEFT holds the labels, RIGHT the values
ROW, TOP, AXIS, BAR = 24, 6, 34, 14  # a row's height, the space above the first and below the last, a bar's height
LABEL_CHARS = 28
ABOUT_ONE = (0.97, 1.03)
MIN_RANGE = (0.5, 2.0)  # the axis shows at least this much
PAD = 1.2  # factor beyond the outermost bar
WHISKER_REACH = 4.0  # intervals widen the axis at most this factor beyond the outermost bar; beyond, they are clipped
MAX_TICKS = 12
PNG_COLUMNS, PNG_MAX_WIDTH, PNG_MAX_HEIGHT = 12, 14.0, 60.0  # the suite PNG (kbench.reports.leaderboard.chart), inches
COLORS = {"correct": "#1b7f3b", "suspect": "#a05a00", "failed": "#b3261e", "reference": "#6b7280",
          "about-one": "#8a93a3", "slower": "#c2410c"}  # slower: a correct row significantly below 1x, never green
ACCENT, INK, GRID = "#2457a6", "#1d2430", "#e5e8ee"


@dataclass(frozen=True)
class SpeedupBar:
    label: str  # shortened to LABEL_CHARS
    css: str  # the row's kind, and " about-one" when its interval reaches ABOUT_ONE
    y: float  # the bar's centre line
    x: float  # the bar's left edge (the 1x line for a speedup, the value for a slowdown)
    width: float
    end: float  # x of the value
    low: float  # x of the interval's ends, clamped to the axis
    high: float
    text: str  # "2.00x"
    title: str  # hover text: the full label, the value and its interval

    @property
    def about_one(self) -> bool:
        return "about-one" in self.css.split()


@dataclass(frozen=True)
class SpeedupChart:
    width: int
    height: int
    left: int  # x where the axis starts
    right: int  # x where it ends
    one: float  # x of the 1x line
    ticks: tuple[tuple[float, str], ...]  # (x, label)
    bars: tuple[SpeedupBar, ...]
    axis_y: float
    low: float  # the axis' ends, as speedups
    high: float


def _decimals(value: float) -> int:
    return max(0, -math.floor(math.log10(value) + 1e-6))


def tick_label(value: float) -> str:
    """"0.5x", "1x", "20x": as many decimals as the value needs."""
    return f"{value:.{_decimals(value)}f}x"


def speedup_ticks(lo: float, hi: float) -> list[float]:
    """1, 2 and 5 times powers of ten from lo to hi; 1 and 3 times, or powers alone, when those are too many.
    1x is always one of them when lo <= 1 <= hi."""
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    ticks: list[float] = []
    for multiples in ((1, 2, 5), (1, 3), (1,)):
        ticks = sorted(m * 10.0**d for d in decades for m in multiples if lo <= m * 10.0**d <= hi)
        if len(ticks) <= MAX_TICKS:
            break
    return ticks


def _finite(v: float) -> bool:
    return v is not None and math.isfinite(v) and v > 0


def axis_range(values: Sequence[float], ends: Sequence[float]) -> tuple[float, float]:
    """The axis' ends: the bars and 1x, their intervals up to WHISKER_REACH beyond, a margin, at least MIN_RANGE."""
    lo, hi = min(*values, 1.0), max(*values, 1.0)
    finite = [e for e in ends if _finite(e)]
    lo = min(lo, max(min(finite, default=lo), lo / WHISKER_REACH))
    hi = max(hi, min(max(finite, default=hi), hi * WHISKER_REACH))
    return min(lo / PAD, MIN_RANGE[0]), max(hi * PAD, MIN_RANGE[1])


def _about_one(low: float, high: float) -> bool:
    """The interval reaches the band ABOUT_ONE (an unknown interval, NaN, counts as reaching it)."""
    return not (low > ABOUT_ONE[1] or high < ABOUT_ONE[0])


def _ratio(v: float) -> str:
    return "∞" if v == math.inf else f"{v:.2f}"


def speedup_chart(rows: Sequence[tuple[str, float, float, float, str]]) -> SpeedupChart | None:
    """The chart of rows (label, speedup, interval low, interval high, kind: a CSS class such as "correct" or
    "suspect"), one bar each in their order; rows without a positive finite speedup are left out (None when no
    row is left)."""
    rows = [row for row in rows if _finite(row[1])]
    if not rows:
        return None
    lo, hi = axis_range([r[1] for r in rows], [e for r in rows for e in (r[2], r[3])])
    span = math.log10(hi) - math.log10(lo)

    def x(v: float) -> float:
        v = min(max(v, lo), hi) if not math.isnan(v) else 1.0
        return round(LEFT + (math.log10(v) - math.log10(lo)) / span * (WIDTH - LEFT - RIGHT), 1)

    one, bars = x(1.0), []
    for i, (label, value, low, high, kind) in enumerate(rows):
        end, y = x(value), TOP + ROW * (i + 0.5)
        css = (f"{kind} about-one" if _about_one(low, high) else
               f"{kind} slower" if kind == "correct" and value < 1.0 else kind)
        short = label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"
        title = f"{label}: {value:.3g}x vs eager, interval {_ratio(low)}-{_ratio(high)}x"
        bars.append(SpeedupBar(short, css, y, min(one, end), round(abs(end - one), 1), end,
                               x(low if _finite(low) else lo), x(high if _finite(high) else hi),
                               f"{value:.2f}x", title))
    ticks = tuple((x(t), tick_label(t)) for t in speedup_ticks(lo, hi))
    axis_y = TOP + ROW * len(rows)
    return SpeedupChart(WIDTH, int(axis_y + AXIS), LEFT, WIDTH - RIGHT, one, ticks, tuple(bars), axis_y, lo, hi)


def _bar_svg(b: SpeedupBar, chart: SpeedupChart) -> str:
    kinds = b.css.split()
    color = (COLORS["about-one"] if b.about_one else COLORS["slower"] if "slower" in kinds
             else COLORS.get(kinds[0], ACCENT))
    y0, half = b.y - BAR / 2, BAR / 2 - 3
    return (f'<g class="{escape(b.css)}" color="{color}"><title>{escape(b.title)}</title>'
            f'<text x="{chart.left - 8}" y="{b.y + 4}" text-anchor="end">{escape(b.label)}</text>'
            f'<rect class="bar" x="{b.x}" y="{y0}" width="{max(b.width, 1.0)}" height="{BAR}" fill="currentColor" '
            f'fill-opacity="0.3" stroke="currentColor"/>'
            f'<path class="whisker" d="M{b.low} {b.y}H{b.high}M{b.low} {b.y - half}v{2 * half}'
            f'M{b.high} {b.y - half}v{2 * half}" stroke="currentColor" stroke-width="1.5" fill="none"/>'
            f'<line class="value" x1="{b.end}" x2="{b.end}" y1="{y0}" y2="{y0 + BAR}" stroke="currentColor" '
            f'stroke-width="2.5"/>'
            f'<text x="{chart.width - 4}" y="{b.y + 4}" text-anchor="end" fill="currentColor">{escape(b.text)}</text>'
            "</g>")


def speedup_svg(chart: SpeedupChart, caption: str = "Speedup vs eager per solution, log scale") -> str:
    """The chart as one self-contained <svg> element: no script, no style sheet, no external resource."""
    cap = escape(caption)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="speedups" viewBox="0 0 {chart.width} {chart.height}" '
             f'width="{chart.width}" height="{chart.height}" role="img" aria-label="{cap}" '
             f'font-family="system-ui, sans-serif" font-size="11" fill="{INK}"><title>{cap}</title>']
    for x, label in chart.ticks:
        parts.append(f'<line class="grid-line" x1="{x}" x2="{x}" y1="0" y2="{chart.axis_y}" stroke="{GRID}"/>'
                     f'<text x="{x}" y="{chart.axis_y + 15}" text-anchor="middle">{escape(label)}</text>')
    parts.append(f'<line class="axis" x1="{chart.left}" x2="{chart.right}" y1="{chart.axis_y}" y2="{chart.axis_y}" '
                 f'stroke="#8a93a3"/>')
    parts += [_bar_svg(b, chart) for b in chart.bars]
    parts.append(f'<line class="one" x1="{chart.one}" x2="{chart.one}" y1="0" y2="{chart.axis_y + 4}" '
                 f'stroke="{INK}" stroke-width="1.5"/>'
                 f'<text x="{chart.right}" y="{chart.axis_y + 29}" text-anchor="end">speedup vs eager, log scale '
                 "(right of 1x: faster)</text></svg>")
    return "".join(parts)


def png_layout(problems: int, solutions: int) -> tuple[tuple[float, float], bool]:
    """The suite PNG's (figure size in inches, problems across): up to PNG_COLUMNS problems stand as columns, more
    lie as rows, the figure then growing in height only; never wider than PNG_MAX_WIDTH inches."""
    group = 0.2 + 0.14 * max(1, solutions)  # inches per problem along the problems' axis
    if problems <= PNG_COLUMNS:
        return (min(PNG_MAX_WIDTH, max(6.0, group * problems + 2.0)), 5.0), True
    return (10.0, min(PNG_MAX_HEIGHT, max(4.0, group * problems + 1.5))), False
