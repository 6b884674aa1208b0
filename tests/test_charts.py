"""Charts that can be read: the sample strips' ticks, context and clipping, the per-problem speedup SVG, and the suite
PNG's size and axis (issue 31)."""

from __future__ import annotations

import random
import re
import struct
from pathlib import Path

import pytest

from kbench.reports import leaderboard, speedup_chart, strips
from kbench.reports.speedup_chart import speedup_svg
from kbench.results.records import EAGER, Evaluation, Status

PLOT = strips.WIDTH - strips.LEFT - strips.RIGHT  # the strips' axis width in px


def around(ms: float, n: int = 200, rel: float = 0.0005, seed: int = 1) -> list[float]:
    """n samples in seconds, normally spread by `rel` around `ms` milliseconds."""
    rng = random.Random(seed)
    return [ms * 1e-3 * (1 + rng.gauss(0, rel)) for _ in range(n)]


def by_label(chart: strips.Chart) -> dict[str, strips.Strip]:
    return {s.label: s for s in chart.strips}


# --- sample strips ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lo, hi", [(10.55, 10.65), (10.6, 10.61), (0.998, 1.002), (123.4, 123.9), (0.0, 7.3)])
def test_tick_labels_of_a_narrow_range_are_distinct(lo: float, hi: float) -> None:
    ticks = strips.linear_ticks(lo, hi)
    labels = strips.tick_labels(ticks, log=False)
    assert len(ticks) >= 3 and len(set(labels)) == len(labels), labels


def test_the_chart_ticks_of_samples_near_one_value_are_distinct_and_round() -> None:
    chart = strips.chart([("a", "correct", around(10.6)), ("b", "correct", around(10.62, seed=2))])
    assert chart is not None and not chart.log and chart.unit == "ms"
    labels = [label for _, label in chart.ticks]
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
    assert "10.6" in labels and all(len(label.split(".")[-1]) <= 2 for label in labels), labels
    xs = [x for x, _ in chart.ticks]
    assert xs == sorted(xs) and strips.LEFT <= xs[0] and xs[-1] <= strips.WIDTH - strips.RIGHT
    q1, q3 = re.search(r"quartiles (\S+)-(\S+) ms", chart.strips[0].title).groups()  # hover text tells them apart
    assert q1 != q3 and float(q1) < 10.6 < float(q3), chart.strips[0].title


def test_log_tick_labels_are_distinct() -> None:
    ticks = strips.log_ticks(0.013, 4.2)
    labels = strips.tick_labels(ticks, log=True)
    assert labels == ["0.02", "0.05", "0.1", "0.2", "0.5", "1", "2"]


def test_a_tiny_gap_is_drawn_small_not_zoomed_into_a_large_one() -> None:
    """Medians 0.2% apart: the axis keeps ±5% of context, so they lie under 5% of its width apart."""
    chart = strips.chart([("a", "correct", around(10.00)), ("b", "correct", around(10.02, seed=2))])
    a, b = by_label(chart)["a"], by_label(chart)["b"]
    assert 0 < b.median - a.median < 0.05 * PLOT
    assert chart.low <= 0.95 * 10.01 and chart.high >= 1.05 * 10.01  # ms
    wide = strips.chart([("a", "correct", around(10.0)), ("b", "correct", around(20.0, seed=2))])
    a, b = by_label(wide)["a"], by_label(wide)["b"]
    assert b.median - a.median > 0.7 * PLOT  # a real 2x gap still fills the axis


def test_an_outlier_is_clipped_counted_and_does_not_squash_the_other_rows() -> None:
    spiky = around(1.0) + [100e-3]  # one call 100x the rest
    chart = strips.chart([("spiky", "correct", spiky), ("steady", "correct", around(1.1, seed=2))])
    assert chart is not None and not chart.log and chart.unit == "ms" and chart.high < 2.0
    spike, steady = by_label(chart)["spiky"], by_label(chart)["steady"]
    assert (spike.clipped_high, spike.clipped_low, steady.clipped_high, steady.clipped_low) == (1, 0, 0, 0)
    assert "1 sample above" in spike.title and "clipped" in spike.title and "clipped" not in steady.title
    assert steady.median - spike.median > 0.4 * PLOT  # the 10% gap keeps its room
    assert spike.hi < steady.median  # the whisker stops at the last sample on the axis; the outlier lies at the edge
    assert f"M{float(strips.WIDTH - strips.RIGHT)} " in spike.dots
    assert spike.dots.count("h0") == strips.MAX_DOTS and "l4 4l-4 4" in spike.dots  # the dots and a chevron
    low = strips.chart([("dip", "correct", around(1.0) + [0.001e-3]), ("steady", "correct", around(1.1, seed=2))])
    assert by_label(low)["dip"].clipped_low == 1 and not low.log


def test_rows_far_apart_still_get_a_log_axis_but_an_outlier_alone_does_not() -> None:
    assert strips.chart([("fast", "correct", around(0.01)), ("slow", "reference", around(5.0, seed=2))]).log
    assert not strips.chart([("a", "correct", around(1.0) + [1.0, 2.0])]).log


# --- the per-problem speedup chart ------------------------------------------------------------------------------


def rows() -> list[tuple[str, float, float, float, str]]:
    return [("twice", 2.0, 1.9, 2.1, "correct"), ("half", 0.5, 0.48, 0.52, "suspect"),
            ("<b>x</b>", 1.01, 0.99, 1.04, "correct"), ("unsure", 3.0, 0.0, float("inf"), "correct")]


def test_the_speedup_chart_has_a_1x_tick_and_bars_on_either_side_of_it() -> None:
    chart = speedup_chart.speedup_chart(rows())
    assert chart is not None and chart.width == 760 and chart.height > 4 * 20
    labels = dict((label, x) for x, label in chart.ticks)
    assert {"0.5x", "1x", "2x"} <= labels.keys() and labels["1x"] == chart.one
    twice, half, near, unsure = chart.bars
    assert twice.end > chart.one and twice.x == chart.one and twice.width > 0
    assert half.end < chart.one and half.x + half.width == pytest.approx(chart.one, abs=0.2)
    assert twice.end - chart.one == pytest.approx(chart.one - half.end, abs=0.2)  # a log axis: 2x mirrors 0.5x
    assert twice.low < twice.end < twice.high
    assert [b.about_one for b in chart.bars] == [False, False, True, True]
    assert "about-one" in near.css.split() and near.css.split()[0] == "correct"
    assert chart.left <= unsure.low and unsure.high <= chart.right  # an unknown interval is clipped to the axis


def test_the_speedup_ticks_adapt_to_the_range_and_always_hold_1x() -> None:
    assert speedup_chart.speedup_ticks(0.4, 2.4) == [0.5, 1.0, 2.0]
    wide = speedup_chart.speedup_ticks(0.008, 600.0)
    assert 1.0 in wide and len(wide) <= speedup_chart.MAX_TICKS and 100.0 in wide
    assert [speedup_chart.tick_label(t) for t in (0.05, 0.5, 1.0, 20.0)] == ["0.05x", "0.5x", "1x", "20x"]
    chart = speedup_chart.speedup_chart([("a", 1.01, 1.0, 1.02, "correct")])
    assert chart.low <= 0.5 and chart.high >= 2.0  # 1.01x is not zoomed into a large bar
    assert chart.bars[0].width < 0.02 * (chart.right - chart.left)
    assert speedup_chart.speedup_chart([("a", float("nan"), 0, 1, "failed"), ("b", 0.0, 0, 0, "failed")]) is None


def test_the_speedup_svg_is_self_contained_and_escapes_labels() -> None:
    svg = speedup_svg(speedup_chart.speedup_chart(rows()))
    assert svg.startswith("<svg") and svg.endswith("</svg>") and 'xmlns="http://www.w3.org/2000/svg"' in svg
    assert "<b>" not in svg and "&lt;b&gt;x&lt;/b&gt;" in svg
    assert "<script" not in svg and "href" not in svg and "url(" not in svg and "<style" not in svg
    assert svg.count('class="correct about-one"') == 2 and svg.count('class="suspect"') == 1
    assert ">1x</text>" in svg and 'class="one"' in svg
    assert svg.count("<g ") == 4


# --- the suite PNG ----------------------------------------------------------------------------------------------


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def suite(problems: int, speedup: float = 1.02) -> list[Evaluation]:
    out = []
    for i in range(problems):
        p = f"level1_problem_{i:02d}_with_a_long_name"
        out += [Evaluation(p, EAGER, Status.CORRECT, "cuda", "full", speedup_vs_eager=1.0),
                Evaluation(p, "a", Status.CORRECT, "cuda", "full", speedup_vs_eager=speedup * (1 + i / 100)),
                Evaluation(p, "b", Status.CORRECT, "cuda", "full", speedup_vs_eager=0.9)]
    return out


@pytest.mark.parametrize("problems", [1, 5, 12, 20, 40])
def test_the_suite_png_stays_at_most_about_1800_px_wide(tmp_path: Path, problems: int) -> None:
    pytest.importorskip("matplotlib")
    png = leaderboard.chart(suite(problems), tmp_path / "speedups.png")
    assert png is not None
    width, height = png_size(png)
    assert 600 <= width <= 1800, (problems, width)
    assert height >= (problems * 10 if problems > 12 else 300)  # rows get room: the figure grows in height


def test_the_suite_png_has_a_log_axis_with_1x_for_speedups_near_one(tmp_path: Path) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    saved: list = []
    original = plt.Figure.savefig

    def keep(fig, *args, **kwargs):  # the figure's axes as drawn, before chart() closes it
        saved.append(fig.axes[0])
        return original(fig, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt.Figure, "savefig", keep)
        leaderboard.chart(suite(3), tmp_path / "few.png")
        leaderboard.chart(suite(40), tmp_path / "many.png")
    few, many = saved
    assert few.get_yscale() == "log" and many.get_xscale() == "log"
    low, high = few.get_ylim()
    assert low <= 0.5 and high >= 2.0  # not a 0-1 axis on which bars near 1 all look alike
    assert "1x" in [t.get_text() for t in few.get_yticklabels()]
    assert "1x" in [t.get_text() for t in many.get_xticklabels()]
    assert len(many.get_yticklabels()) == 40  # one row per problem


def test_a_correct_slowdown_is_drawn_in_its_own_colour_never_a_wins_green() -> None:
    chart = speedup_chart.speedup_chart([("win", 2.0, 1.9, 2.1, "correct"), ("copy", 0.77, 0.76, 0.78, "correct"),
                                         ("noise", 0.99, 0.97, 1.01, "correct")])
    assert chart is not None
    win, copy, noise = chart.bars
    assert "slower" in copy.css.split() and "slower" not in win.css.split() and noise.about_one
    svg = speedup_svg(chart)
    colours = re.findall(r'<g class="([^"]+)" color="([^"]+)"', svg)
    assert dict(colours)["correct slower"] == speedup_chart.COLORS["slower"] != speedup_chart.COLORS["correct"]
    assert dict(colours)["correct"] == speedup_chart.COLORS["correct"]


def test_a_long_suites_png_is_its_sorted_speedups_at_a_fixed_size(tmp_path: Path) -> None:
    """250 problems as one bar each would be thousands of pixels tall with bars too thin to see: the chart becomes
    each solution's speedups sorted over the problems, one line each, on a fixed 1440x720 canvas."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    saved: list = []
    original = plt.Figure.savefig

    def keep(fig, *args, **kwargs):
        saved.append(fig.axes[0])
        return original(fig, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt.Figure, "savefig", keep)
        png = leaderboard.chart(suite(250), tmp_path / "speedups.png")
    assert png is not None and png_size(png) == (1440, 720)
    ax = saved[0]
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("eager")}
    assert sorted(lines) == ["a (250 problems)", "b (250 problems)"]
    ys = list(lines["a (250 problems)"].get_ydata())
    assert ys == sorted(ys) and len(ys) == 250 and ax.get_yscale() == "log"
