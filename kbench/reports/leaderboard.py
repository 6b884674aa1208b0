"""`kbench report`: each problem's solutions ranked, suite-wide fast_p and geometric-mean speedups, a chart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from kbench.results.records import COMPILED, EAGER, Evaluation, Status
from kbench.results.stats import geometric_mean
from kbench.results.storage import atomic_write, latest_run, load, resolve

FAST_P = (0.0, 1.0, 1.5, 2.0)
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
    """Correct solutions by median time, then the others by name."""
    rows = [e for e in evaluations if e.problem == problem]
    timed = sorted((e for e in rows if e.status == Status.CORRECT and e.timing), key=lambda e: e.timing.median)
    return timed + sorted((e for e in rows if e not in timed), key=lambda e: e.solution)


def _best(evaluations: Sequence[Evaluation], problem: str, attr: str) -> float | None:
    speeds = [getattr(e, attr) for e in solutions_of(evaluations, problem)
              if e.status == Status.CORRECT and getattr(e, attr) is not None]
    return max(speeds) if speeds else None


def fast_p(evaluations: Sequence[Evaluation], p: float, attr: str = "speedup_vs_eager") -> float:
    """Share of problems with a correct solution more than p times faster than the baseline (fast_0: any correct)."""
    problems = sorted({e.problem for e in evaluations})
    if not problems:
        return 0.0
    wins = 0
    for problem in problems:
        best = _best(evaluations, problem, attr)
        correct = any(e.status == Status.CORRECT for e in solutions_of(evaluations, problem))
        wins += (correct and p == 0) or (best is not None and best > p)
    return wins / len(problems)


def summarize(evaluations: Sequence[Evaluation]) -> Summary:
    problems = sorted({e.problem for e in evaluations})

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


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else ""


def markdown(doc: dict, evaluations: Sequence[Evaluation]) -> str:
    env = doc.get("environment", {})
    device = (env.get("gpu") or {}).get("name") or env.get("cpu", "?")
    s = summarize(evaluations)
    lines = [
        f"# kbench report: run {doc.get('run_id', '?')}",
        "",
        f"{device}, torch {env.get('torch', '?')}, started {doc.get('started', '?')}, state {doc.get('state', '?')}.",
        "",
        "## Suite",
        "",
        tabulate(
            [["vs eager", *[f"{v:.0%}" for _, v in s.fast_p_eager], _x(s.geomean_eager)],
             ["vs torch.compile", *[f"{v:.0%}" for _, v in s.fast_p_compile], _x(s.geomean_compile)]],
            headers=["baseline", *[f"fast_{p:g}" for p in FAST_P], "geomean (best per problem)"], tablefmt="github",
        ),
        "",
        f"fast_p: share of the {s.problems} problem(s) with a correct solution more than p times faster than the "
        "baseline (fast_0: any correct solution).",
    ]
    for problem in sorted({e.problem for e in evaluations}):
        rows = [[i, e.solution, e.status.value, f"{e.timing.median * 1e3:.3f}" if e.timing else "",
                 _x(e.speedup_vs_eager), _x(e.speedup_vs_compile),
                 f"{e.max_abs_err:.1e}" if e.max_abs_err is not None else "", e.message.splitlines()[0] if e.message else ""]
                for i, e in enumerate(ranked(evaluations, problem), start=1)]
        lines += ["", f"## {problem}", "", tabulate(
            rows, headers=["rank", "solution", "status", "median ms", "vs eager", "vs compile", "max abs err", "note"],
            tablefmt="github", disable_numparse=True)]
        lines += noise_line(evaluations, problem)
    return "\n".join(lines) + "\n"


def noise_line(evaluations: Sequence[Evaluation], problem: str) -> list[str]:
    """The reference's own error against float64 beside the tolerance (kbench.judge.noise), from the problem's eager row."""
    eager = next((e for e in evaluations if e.problem == problem and e.solution == EAGER), None)
    noise = (eager.extra.get("noise") or {}) if eager is not None else {}
    if "max_abs" not in noise:
        return []
    verdict = ("an exact result passes" if noise.get("exact_passes") else
               f"an exact result fails: only the library's rounding passes ({noise.get('cause', '?')})")
    return ["", f"Reference at {noise.get('precision', 'fp32')} against float64: max error {noise['max_abs']:.2g} "
                f"at atol={noise.get('atol', 0):g}, rtol={noise.get('rtol', 0):g}; {verdict}."]


def chart(evaluations: Sequence[Evaluation], path: Path) -> Path | None:
    """Bar chart of speedup vs eager per problem and solution; None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    speed = {(e.problem, e.solution): e.speedup_vs_eager for e in evaluations
             if e.status == Status.CORRECT and e.speedup_vs_eager and e.solution != EAGER}
    if not speed:
        return None
    problems = sorted({p for p, _ in speed})
    solutions = sorted({s for _, s in speed})
    width = 0.8 / len(solutions)
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(problems) + 2), 4.5))
    for i, solution in enumerate(solutions):
        present = [(j, speed[(p, solution)]) for j, p in enumerate(problems) if (p, solution) in speed]
        ax.bar([j + i * width for j, _ in present], [v for _, v in present], width, label=solution)
    if max(speed.values()) / min(speed.values()) > LOG_SCALE_SPREAD:
        ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="eager (1x)")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(problems))], problems, rotation=15, ha="right")
    ax.set_ylabel("speedup vs eager (higher is better)")
    ax.set_title("kbench: speedup per problem and solution")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(ref: str | None, results_dir: Path, with_chart: bool = True) -> tuple[Path, Path | None, str]:
    """Write report.md (and speedups.png) next to a run's run.json (default: the latest run).

    Returns (markdown path, chart path or None, markdown text).
    """
    run = load(resolve(ref, results_dir)) if ref else latest_run(results_dir, [])
    doc, evaluations = run.doc, run.evaluations
    directory = run.path if run.path.is_dir() else run.path.parent
    text = markdown(doc, evaluations)
    md_path = directory / "report.md"
    atomic_write(md_path, text)
    png = chart(evaluations, directory / "speedups.png") if with_chart else None
    return md_path, png, text


def write_kernelbench(ref: str | None, results_dir: Path) -> Path:
    """Write eval_results.json in KernelBench's field names next to a run's run.json (default: the latest run)."""
    from kbench.problems.kernelbench_runs import write_eval_results

    run = load(resolve(ref, results_dir)) if ref else latest_run(results_dir, [])
    return write_eval_results(run.path if run.path.is_dir() else run.path.parent, run.doc, run.evaluations)
