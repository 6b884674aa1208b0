"""`kbench report`: each problem's solutions ranked, suite-wide fast_p and geometric-mean speedups, a chart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from kbench.problems.kernelbench_runs import write_eval_results
from kbench.reports.caveats import degenerate_problems
from kbench.reports.speedup_chart import PAD, png_layout, speedup_ticks, tick_label
from kbench.results.records import COMPILED, EAGER, Evaluation, Measurement, Status, problem_order
from kbench.results.speedups import NOISE_BAND, significant_fast_p
from kbench.results.stats import geometric_mean
from kbench.results.storage import latest_run, load, resolve

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)  # the thresholds KernelBench users quote
BASELINE_ROWS = (EAGER, COMPILED)
LOG_SCALE_SPREAD = 10  # use a log axis when the largest speedup is this many times the smallest


@dataclass(frozen=True)
class Summary:
    problems: int
    fast_p_eager: tuple[tuple[float, float], ...]  # (p, share of problems)
    fast_p_compile: tuple[tuple[float, float], ...]
    geomean_eager: float | None  # over problems with a correct solution: their best speedup
    geomean_compile: float | None


def solutions_of(evaluations: Sequence[Evaluation], problem: str) -> list[Evaluation]:
    return [e for e in evaluations if e.problem == problem and e.solution not in BASELINE_ROWS]


def ranked(evaluations: Sequence[Evaluation], problem: str) -> list[Evaluation]:
    """Correct rows fastest first, then the others by name. Fastest by speedup vs eager where every correct row has
    one (each divided by the eager of its own rounds, on its own GPU: rows of a run spread over GPUs, whose eager row
    may have run on another GPU at another time, rank by what was measured side by side), else by median time."""
    rows = [e for e in evaluations if e.problem == problem]
    timed = [e for e in rows if e.status == Status.CORRECT and e.timing]
    if timed and all(e.speedup_vs_eager for e in timed):
        timed.sort(key=lambda e: (-cast(float, e.speedup_vs_eager), cast(Measurement, e.timing).median))
    else:
        timed.sort(key=lambda e: cast(Measurement, e.timing).median)  # timed: not None
    return timed + sorted((e for e in rows if e not in timed), key=lambda e: e.solution)


def _best(evaluations: Sequence[Evaluation], problem: str, attr: str) -> float | None:
    speeds = [getattr(e, attr) for e in solutions_of(evaluations, problem)
              if e.status == Status.CORRECT and getattr(e, attr) is not None]
    return max(speeds) if speeds else None


def fast_p(evaluations: Sequence[Evaluation], p: float, attr: str = "speedup_vs_eager") -> float:
    """Share of problems with a correct solution more than p times faster than the baseline (fast_0: any correct)."""
    problems = sorted({e.problem for e in evaluations}, key=problem_order)
    if not problems:
        return 0.0
    wins = 0
    for problem in problems:
        best = _best(evaluations, problem, attr)
        correct = any(e.status == Status.CORRECT for e in solutions_of(evaluations, problem))
        wins += (correct and p == 0) or (best is not None and best > p)
    return wins / len(problems)


def summarize(evaluations: Sequence[Evaluation]) -> Summary:
    problems = sorted({e.problem for e in evaluations}, key=problem_order)

    def geo(attr: str) -> float | None:
        best = [b for p in problems if (b := _best(evaluations, p, attr)) is not None]
        return geometric_mean(best) if best else None

    return Summary(
        problems=len(problems),
        fast_p_eager=tuple((p, fast_p(evaluations, p, "speedup_vs_eager")) for p in FAST_P),
        fast_p_compile=tuple((p, fast_p(evaluations, p, "speedup_vs_compile")) for p in FAST_P),
        geomean_eager=geo("speedup_vs_eager"),
        geomean_compile=geo("speedup_vs_compile"),
    )


NOT_COMPILED = (Status.COMPILE_ERROR, Status.LOAD_ERROR)  # a solution that never ran: KernelBench's "not compiled"


def rates(evaluations: Sequence[Evaluation]) -> str:
    """The solution rows' compile and correctness rates, as KernelBench users quote them: the share that compiled and
    loaded, the share correct ("" when there is no solution row)."""
    rows = [e for e in evaluations if e.solution not in BASELINE_ROWS]
    if not rows:
        return ""
    compiled = sum(e.status not in NOT_COMPILED for e in rows) / len(rows)
    correct = sum(e.status == Status.CORRECT for e in rows) / len(rows)
    return f"compiled {compiled:.0%}, correct {correct:.0%}"


def ratio_text(value: float | None) -> str:
    """A ratio as the tables print it (2.00x), empty for none."""
    return f"{value:.2f}x" if value is not None else ""


def noise_line(evaluations: Sequence[Evaluation], problem: str) -> list[str]:
    """The reference's own error against float64 beside the tolerance (kbench.judge.checks.noise), from its eager
    row."""
    eager = next((e for e in evaluations if e.problem == problem and e.solution == EAGER), None)
    noise = eager.diagnostics.noise if eager is not None else None
    if noise is None:
        return []
    verdict = ("an exact result passes" if noise.exact_passes else
               f"an exact result fails: only the library's rounding passes ({noise.cause or '?'})")
    return ["", f"Reference at {noise.precision} against float64: max error {noise.max_abs:.2g} "
                f"at atol={noise.atol:g}, rtol={noise.rtol:g}; {verdict}."]


def sound_fast_p(evaluations: Sequence[Evaluation], problems: Sequence[str]) -> tuple[int, list[float]] | None:
    """The significant fast_p at each FAST_P with the degenerate problems left out (a solution returning zeros may be
    `correct` there), and how many were left out: None where none is degenerate."""
    degenerate = degenerate_problems(evaluations)
    sound = [p for p in problems if p not in degenerate]
    if len(sound) == len(problems):
        return None
    return len(problems) - len(sound), [significant_fast_p(evaluations, sound, p) for p in FAST_P]


def gpu_line(evaluations: Sequence[Evaluation], problem: str) -> str:
    """Where a problem's rows ran, when they ran on more than one GPU ("" otherwise): each row's speedup divides by
    the eager of its own rounds on its own GPU, but the eager row and the solutions may have run on different ones."""
    rows = [e for e in evaluations if e.problem == problem and e.gpu is not None]
    if len({e.gpu for e in rows}) < 2:
        return ""
    by_gpu: dict[str, list[str]] = {}
    for e in rows:
        by_gpu.setdefault(str(e.gpu), []).append(e.solution)
    names = {str(e.gpu): e.gpu_name for e in rows if e.gpu_name}
    where = "; ".join(f"GPU {gpu}{f' ({names[gpu]})' if gpu in names else ''}: {', '.join(solutions)}"
                      for gpu, solutions in sorted(by_gpu.items()))
    return f"Rows ran on {len(by_gpu)} GPUs: {where}."


def chart(evaluations: Sequence[Evaluation], path: Path) -> Path | None:
    """Bar chart of speedup vs eager per problem and solution; None when matplotlib is not installed.

    Speedups are ratios: the axis is logarithmic (at least 0.5x-2x, 1x marked) and each bar runs from 1x to its
    value. A few problems stand as columns (labels rotated), more lie as rows: the figure is never wider than
    14 inches, 1680 px at dpi 120 (kbench.reports.speedup_chart.png_layout)."""
    try:
        import matplotlib  # heavy and optional (the plot extra): imported only to draw the chart

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # heavy and optional, as above
        from matplotlib.ticker import FixedLocator, NullLocator  # heavy and optional, as above
    except ImportError:
        return None

    speed = {(e.problem, e.solution): e.speedup_vs_eager for e in evaluations
             if e.status == Status.CORRECT and e.speedup_vs_eager and e.solution != EAGER}
    if not speed:
        return None
    problems, solutions = sorted({p for p, _ in speed}, key=problem_order), sorted({s for _, s in speed})
    if len(problems) > DISTRIBUTION_FROM:
        return _distribution(plt, speed, solutions, path)
    size, across = png_layout(len(problems), len(solutions))
    width = 0.8 / len(solutions)
    fig, ax = plt.subplots(figsize=size)
    for i, solution in enumerate(solutions):
        present = [(j, speed[(p, solution)]) for j, p in enumerate(problems) if (p, solution) in speed]
        where = [j + (i - (len(solutions) - 1) / 2) * width for j, _ in present]
        bars = [v - 1.0 for _, v in present]  # from 1x to the value: up (right) is faster, down (left) slower
        if across:
            ax.bar(where, bars, width, bottom=1.0, label=solution)
        else:
            ax.barh(where, bars, width, left=1.0, label=solution)
    lo, hi = min(0.5, min(speed.values()) / PAD), max(2.0, max(speed.values()) * PAD)
    value_axis = ax.yaxis if across else ax.xaxis
    (ax.set_yscale if across else ax.set_xscale)("log")
    (ax.set_ylim if across else ax.set_xlim)(lo, hi)
    value_axis.set_major_locator(FixedLocator(speedup_ticks(lo, hi)))
    value_axis.set_minor_locator(NullLocator())
    value_axis.set_major_formatter(lambda v, _: tick_label(v))
    value_axis.grid(True, color="#e5e8ee")
    ax.set_axisbelow(True)
    (ax.axhline if across else ax.axvline)(1.0, color="black", linewidth=1, linestyle="--", label="eager (1x)")
    if across:
        ax.set_xticks(range(len(problems)), problems, rotation=35, ha="right", fontsize="small")
    else:  # rows top to bottom in name order
        ax.set_yticks(range(len(problems)), problems, fontsize="small")
        ax.set_ylim(len(problems) - 0.5, -0.5)
    (ax.set_ylabel if across else ax.set_xlabel)("speedup vs eager (log scale; "
                                                  f"{'higher' if across else 'further right'} is faster)")
    ax.set_title("kbench: speedup per problem and solution")
    ax.legend(fontsize="small", loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


DISTRIBUTION_FROM = 40  # problems beyond which the suite chart is each solution's sorted speedups, not a bar each
DISTRIBUTION_SIZE = (12.0, 6.0)  # inches, at dpi 120: 1440 x 720 px whatever the number of problems


def _distribution(plt: Any, speed: dict[tuple[str, str], float], solutions: list[str], path: Path) -> Path:
    """The suite chart of a long run: per solution, its speedups over the problems sorted from slowest to fastest
    (x: the share of the problems at or below, y: the speedup on a log axis), the 1x line and the noise band."""
    from matplotlib.ticker import FixedLocator, NullLocator, PercentFormatter  # heavy and optional: the plot extra

    fig, ax = plt.subplots(figsize=DISTRIBUTION_SIZE)
    for solution in solutions:
        values = sorted(v for (_, s), v in speed.items() if s == solution)
        share = [100.0 * (i + 1) / len(values) for i in range(len(values))]
        ax.step(share, values, where="post", label=f"{solution} ({len(values)} problems)")
    lo, hi = min(0.5, min(speed.values()) / PAD), max(2.0, max(speed.values()) * PAD)
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ax.yaxis.set_major_locator(FixedLocator(speedup_ticks(lo, hi)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(lambda v, _: tick_label(v))
    ax.axhspan(1.0 - NOISE_BAND, 1.0 + NOISE_BAND, color="#e5e8ee", label=f"noise (1 ± {NOISE_BAND:g})")
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="eager (1x)")
    ax.set_xlim(0, 100)
    ax.xaxis.set_major_formatter(PercentFormatter())
    ax.set_xlabel("problems with a correct row, sorted by speedup (share at or below)")
    ax.set_ylabel("speedup vs eager (log scale)")
    ax.set_title("kbench: speedups over the suite, sorted")
    ax.grid(True, color="#e5e8ee")
    ax.legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_kernelbench(ref: str | None, results_dir: Path) -> Path:
    """Write eval_results.json in KernelBench's field names next to a run's run.json (default: the latest run)."""
    run = load(resolve(ref, results_dir)) if ref else latest_run(results_dir, [])
    return write_eval_results(run.path if run.path.is_dir() else run.path.parent, run.doc, run.evaluations)
