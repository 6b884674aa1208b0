"""Compare two runs row by row: noise-aware speed verdicts from raw samples, and status changes."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from kbench.errors import UsageError
from kbench.reports import leaderboard
from kbench.reports.compare_summary import (
    BROKEN,
    FAILING,
    FASTER,
    FIXED,
    NEW,
    NOT_RUN,
    REMOVED,
    SAME,
    SLOWER,
    UNCLEAR,
    ComparisonVerdict,
    OneRunOnly,
    plural,
    run_warning,
    split_one_run_only,
    verdict,
)
from kbench.results.records import Evaluation, Status, problem_order
from kbench.results.speedups import significant_fast_p
from kbench.results.stats import mann_whitney_u, median
from kbench.results.storage import LoadedRun, latest_run, latest_two, load, resolve

ALPHA = 0.05  # significance level of the rank test

# asv-style marks: + slower, - faster, ~ not significant, ! newly failing, x failing in both.
MARKS = {SLOWER: "+", FASTER: "-", UNCLEAR: "~", SAME: "", BROKEN: "!", FAILING: "x", FIXED: "*", NEW: "n",
         REMOVED: "r", NOT_RUN: ""}


@dataclass(frozen=True)
class Row:
    problem: str
    solution: str
    size: str
    change: str
    before_ms: float | None = None
    after_ms: float | None = None
    ratio: float | None = None  # after / before median
    p_value: float | None = None
    before_status: str = ""
    after_status: str = ""
    before_x: float | None = None  # the row's speedup over its own run's eager (a correct row that has one)
    after_x: float | None = None
    by_eager: bool = False  # the change was decided on the time relative to each run's own eager (other machines)

    @property
    def x_ratio(self) -> float | None:
        """after / before speedup over eager: what changed whatever the machines."""
        return self.after_x / self.before_x if self.after_x and self.before_x else None

    @property
    def magnitude(self) -> float:
        """How large the change is, for ordering: |log| of the ratio that decided it (0 when there is none)."""
        ratio = (1 / self.x_ratio if self.x_ratio else None) if self.by_eager else self.ratio
        return abs(math.log(ratio)) if ratio and ratio > 0 else 0.0

    @property
    def mark(self) -> str:
        return MARKS[self.change]

    @property
    def regression(self) -> bool:
        return self.change in (SLOWER, BROKEN)


def machine_key(env: Mapping[str, Any], cpu: bool = True) -> tuple[str, str]:
    """(device, torch version) of an environment record (a probe's, a run's): the GPU's name, else the CPU's model
    (`cpu`; else "?"). Timings are comparable only between the same keys; a resume ignores the CPU model (cpu=False)."""
    gpu = env.get("gpu") or {}
    return str(gpu.get("name") or (env.get("cpu") if cpu else None) or "?"), str(env.get("torch", "?"))


def environment_key(run: LoadedRun) -> tuple[str, str]:
    return machine_key(run.doc.get("environment", {}))


def machines_line(before: LoadedRun, after: LoadedRun) -> str:
    """Both runs and their machines, in one line; it says so first when the machines differ."""
    b, a = environment_key(before), environment_key(after)
    text = f"before {before.label} on {b[0]} (torch {b[1]}); after {after.label} on {a[0]} (torch {a[1]})"
    return f"different machines (times differ by the hardware too): {text}" if a != b else text


def check_environments(before: LoadedRun, after: LoadedRun) -> None:
    a, b = environment_key(before), environment_key(after)
    if a != b:
        raise UsageError(
            f"Runs are from different machines or torch versions ({a[0]}, torch {a[1]} vs {b[0]}, torch {b[1]}); "
            "their times are not comparable. Pass --ignore-env to compare anyway."
        )


def speed_verdict(before: Sequence[float], after: Sequence[float], threshold: float,
                  alpha: float = ALPHA) -> tuple[str, float, float]:
    """(verdict, after/before median ratio, p-value) from the raw samples of both sides.

    A change smaller than `threshold` (relative) is `same` however significant; a larger one is
    `faster`/`slower` only when the rank test finds the samples differ at level alpha, else `unclear`.
    """
    ratio = median(after) / median(before)
    _, p = mann_whitney_u(before, after)
    if abs(ratio - 1) < threshold:
        return SAME, ratio, p
    if p >= alpha:
        return UNCLEAR, ratio, p
    return (SLOWER if ratio > 1 else FASTER), ratio, p


def _key(e: Evaluation, run: LoadedRun) -> tuple[str, str, str, str, str]:
    """Rows match on problem, solution, size, precision and the math settings: a bf16 row is never compared with an
    fp32 one."""
    math = run.doc.get("config", {}).get("math", {})
    return e.problem, e.solution, e.size, e.precision, repr(sorted(math.items()))


class _RowKey(TypedDict):
    """The Row fields every change has: which row, and its status on each side ("" where it is missing)."""

    problem: str
    solution: str
    size: str
    before_status: str
    after_status: str


def _relative(e: Evaluation) -> tuple[float, ...] | None:
    """The row's time in each round over the eager reference's time in the same round (its own run's eager divides:
    what compares across machines), or None without paired samples."""
    if e.timing is None or e.eager_timing is None:
        return None
    mine, eager = e.timing.samples, e.eager_timing.samples
    if not mine or len(mine) != len(eager) or any(g <= 0 for g in eager):
        return None
    return tuple(t / g for t, g in zip(mine, eager))


def _x(e: Evaluation | None) -> float | None:
    return e.speedup_vs_eager if e is not None and e.status == Status.CORRECT else None


def _row(b: Evaluation | None, a: Evaluation | None, threshold: float, by_eager: bool = False) -> Row:
    """One row's change: statuses first, then speed; `by_eager` (runs on other machines) decides the speed on each
    run's time relative to its own eager, not on absolute times, which differ by the hardware."""
    ref = a or b
    assert ref is not None
    base: _RowKey = {"problem": ref.problem, "solution": ref.solution, "size": ref.size,
                     "before_status": b.status.value if b else "", "after_status": a.status.value if a else ""}
    row = _decided(b, a, threshold, base, by_eager)
    return dataclasses.replace(row, before_x=_x(b), after_x=_x(a))


def _decided(b: Evaluation | None, a: Evaluation | None, threshold: float, base: _RowKey, by_eager: bool) -> Row:
    if b is None:
        return Row(change=NEW, after_ms=_ms(a), **base)
    if a is None:
        return Row(change=REMOVED, before_ms=_ms(b), **base)
    if b.status == a.status == Status.NOT_RUN:
        return Row(change=NOT_RUN, **base)
    ok_b, ok_a = b.status == Status.CORRECT, a.status == Status.CORRECT
    if not ok_a:
        return Row(change=BROKEN if ok_b else FAILING, before_ms=_ms(b), **base)
    if not ok_b:
        return Row(change=FIXED, after_ms=_ms(a), **base)
    if b.timing is None or a.timing is None:
        return Row(change=UNCLEAR, before_ms=_ms(b), after_ms=_ms(a), **base)
    if by_eager:
        rel_b, rel_a = _relative(b), _relative(a)
        if rel_b is None or rel_a is None:
            return Row(change=UNCLEAR, before_ms=_ms(b), after_ms=_ms(a), by_eager=True, **base)
        change, _, p = speed_verdict(rel_b, rel_a, threshold)
        return Row(change=change, before_ms=_ms(b), after_ms=_ms(a), ratio=a.timing.median / b.timing.median,
                   p_value=p, by_eager=True, **base)
    change, ratio, p = speed_verdict(b.timing.samples, a.timing.samples, threshold)
    return Row(change=change, before_ms=_ms(b), after_ms=_ms(a), ratio=ratio, p_value=p, **base)


def _ms(e: Evaluation | None) -> float | None:
    return e.timing.median * 1e3 if e is not None and e.timing is not None else None


# The order of a comparison's rows: status changes first, then the speeds by the size of their change, then the rest
ORDER = {BROKEN: 0, FIXED: 1, SLOWER: 2, FASTER: 2, UNCLEAR: 2, SAME: 2, NEW: 3, REMOVED: 3, FAILING: 4, NOT_RUN: 5}


def compare_runs(before: LoadedRun, after: LoadedRun, threshold: float, ignore_env: bool = False) -> list[Row]:
    """Rows matched by problem, solution, size and math flags: status changes first, then by the size of the change
    (largest first), then rows new, removed or failing in both. Runs on other machines (`ignore_env`) compare each
    row's time relative to its own run's eager."""
    if not ignore_env:
        check_environments(before, after)
    by_eager = environment_key(before) != environment_key(after)
    old = {_key(e, before): e for e in before.evaluations}
    new = {_key(e, after): e for e in after.evaluations}
    keys = list(new) + [k for k in old if k not in new]
    rows = [_row(old.get(k), new.get(k), threshold, by_eager) for k in keys]
    return sorted(rows, key=lambda r: (ORDER[r.change], -r.magnitude, problem_order(r.problem), r.solution))


def select_runs(a: str | None, b: str | None, baseline: str | None, results_dir: Path,
                warn: list[str]) -> tuple[LoadedRun, LoadedRun]:
    """What `kbench compare [A] [B] [--baseline X]` compares: (before, after)."""
    if baseline is not None:
        if b is not None:
            raise UsageError("With --baseline, name at most one run to compare against it.")
        after = load(resolve(a, results_dir)) if a else latest_run(results_dir, warn)
        return load(resolve(baseline, results_dir)), after
    if a is not None and b is not None:
        return load(resolve(a, results_dir)), load(resolve(b, results_dir))
    if a is not None:
        raise UsageError("Name two runs (kbench compare A B), or one with --baseline, or none for the latest two.")
    return latest_two(results_dir, warn)


@dataclass(frozen=True)
class Comparison:
    """Two runs compared: the rows of the problems both have, and the problems only one has (not rows)."""

    before: LoadedRun
    after: LoadedRun
    rows: tuple[Row, ...]
    warnings: tuple[str, ...]
    only_before: OneRunOnly = field(default_factory=lambda: OneRunOnly("before"))
    only_after: OneRunOnly = field(default_factory=lambda: OneRunOnly("after"))

    @property
    def machines(self) -> str:
        """The first line of every format: both runs and their machines (`machines_line`)."""
        return machines_line(self.before, self.after)

    @property
    def suite(self) -> str:
        """fast_p (significant wins over each run's own eager) and the geomean of bests, before -> after, over the
        problems both runs have: what a suite's change comes to, whatever the machines."""
        both = sorted({e.problem for e in self.before.evaluations} & {e.problem for e in self.after.evaluations},
                      key=problem_order)
        if not both:
            return "suite: no problem in both runs"
        sides = [[e for e in run.evaluations if e.problem in both] for run in (self.before, self.after)]
        fast = ", ".join(f"fast_{p:g} " + " -> ".join(f"{significant_fast_p(rows, both, p):.0%}" for rows in sides)
                         for p in leaderboard.FAST_P)
        means = [leaderboard.summarize(rows).geomean_eager for rows in sides]
        geomean = " -> ".join(f"{m:.2f}x" if m else "-" for m in means)
        return f"suite ({plural(len(both), 'problem')} in both; significant, vs each run's eager): {fast}; " \
               f"geomean {geomean}"

    @property
    def changes(self) -> tuple[Row, ...]:
        """The rows that changed: every row but those the same in both runs or run in neither."""
        return tuple(r for r in self.rows if r.change not in (SAME, NOT_RUN))

    @property
    def regressions(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.regression)

    @property
    def summary(self) -> ComparisonVerdict:
        return verdict(self.rows, self.only_before, self.only_after)

    @property
    def one_run_only(self) -> tuple[OneRunOnly, ...]:
        """The one-run-only sections that have problems."""
        return tuple(o for o in (self.only_before, self.only_after) if o.problems)

    def document(self, rows: list[object]) -> dict[str, object]:
        """`kbench compare --format json`: the summary, the warnings, the one-run-only problems, then `rows`."""
        only = {f"only_in_{o.side}": {"problems": list(o.problems), "rows": o.rows}
                for o in (self.only_before, self.only_after)}
        return {"machines": self.machines, "before": self.before.label, "after": self.after.label,
                "summary": self.summary.line, "suite": self.suite,
                "counts": dict(self.summary.counts), "warnings": list(self.warnings), **only, "rows": rows}


def compare(a: str | None, b: str | None, baseline: str | None, results_dir: Path, threshold: float,
            ignore_env: bool = False) -> Comparison:
    """`kbench compare`: pick the two runs, match their rows, decide each row's change; set apart the problems only
    one run has, and warn about a run that did not finish.

    Args:
        a, b: run references (an id, a prefix, a folder or a run.json path); None picks the newest runs.
        baseline: a saved baseline's name, compared against instead of `a`.
        results_dir: where runs are looked up.
        threshold: the fraction of the median (0 <= threshold < 1, e.g. 0.01 for 1%) a change must exceed, with
            statistical significance, to count as faster or slower.
        ignore_env: match rows across runs on different GPUs or software (then a warning says so).

    Returns:
        The Comparison: matched rows with their change, rows of problems only one run has, and warnings.

    Raises:
        UsageError: a threshold outside [0, 1); ResultsError: a run that cannot be found or read.
    """
    if not 0 <= threshold < 1:
        raise UsageError(f"--threshold must be a fraction in [0, 1), e.g. 1% or 0.01; got {threshold}")
    warn: list[str] = []
    before, after = select_runs(a, b, baseline, results_dir, warn)
    rows, only_before, only_after = split_one_run_only(compare_runs(before, after, threshold, ignore_env), before,
                                                       after)
    if ignore_env and environment_key(before) != environment_key(after):
        warn.append("comparing across machines (--ignore-env): " + machines_line(before, after).split(": ", 1)[1])
    warn += [w for side, run in (("before", before), ("after", after)) if (w := run_warning(side, run)) is not None]
    return Comparison(before, after, rows, tuple(warn), only_before, only_after)
