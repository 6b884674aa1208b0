"""A comparison in a few lines: its verdict, the problems only one run has, and a warning per unfinished run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from kbench.results.storage import LoadedRun, recorded_process, run_state, this_process

# The change of a compared row (kbench.reports.compare decides it): its speed, or its status across the two runs.
FASTER, SLOWER, SAME, UNCLEAR = "faster", "slower", "same", "unclear"
NEW, REMOVED, FIXED, BROKEN, FAILING = "new", "removed", "fixed", "newly failing", "failing"
NOT_RUN = "not run"  # not run in either run (a solution for another device): nothing to compare, nothing wrong
SPEEDS = (FASTER, SLOWER, SAME, UNCLEAR)
STATUS_CHANGES = (BROKEN, FIXED, NEW, REMOVED)
NAMES_SHOWN = 10  # problem names a one-run-only line lists before "... and N more"


class Changed(Protocol):
    """What the summary reads of a row (kbench.reports.compare.Row)."""

    @property
    def problem(self) -> str: ...

    @property
    def change(self) -> str: ...


RowT = TypeVar("RowT", bound=Changed)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass(frozen=True)
class OneRunOnly:
    """Problems only one of the two runs has: listed once, not as rows."""

    side: str  # "before" or "after"
    problems: tuple[str, ...] = ()
    rows: int = 0  # the rows those problems have in their run

    def line(self, shown: int = NAMES_SHOWN) -> str:
        names = ", ".join(self.problems[:shown])
        if len(self.problems) > shown:
            names += f", ... and {len(self.problems) - shown} more"
        return (f"only in the {self.side} run: {plural(len(self.problems), 'problem')} ({plural(self.rows, 'row')}): "
                f"{names}")


def split_one_run_only(rows: Sequence[RowT], before: LoadedRun,
                       after: LoadedRun) -> tuple[tuple[RowT, ...], OneRunOnly, OneRunOnly]:
    """(the rows of problems both runs have, the problems only the before run has, those only the after run has).
    A problem both runs have keeps its new and removed rows (a solution added or dropped)."""
    in_before, in_after = {e.problem for e in before.evaluations}, {e.problem for e in after.evaluations}

    def only(side: str, mine: set[str], theirs: set[str]) -> OneRunOnly:
        picked = [r for r in rows if r.problem in mine and r.problem not in theirs]
        return OneRunOnly(side, tuple(dict.fromkeys(r.problem for r in picked)), len(picked))

    kept = tuple(r for r in rows if r.problem in in_before and r.problem in in_after)
    return kept, only("before", in_before, in_after), only("after", in_after, in_before)


@dataclass(frozen=True)
class ComparisonVerdict:
    """The whole comparison in one line: how many rows got faster, slower..., and the status changes."""

    counts: tuple[tuple[str, int], ...]  # (change, rows) for each change some row has
    only_before: int = 0  # problems only in the before run (not rows)
    only_after: int = 0

    @property
    def rows(self) -> int:
        return sum(n for _, n in self.counts)

    def count(self, change: str) -> int:
        return dict(self.counts).get(change, 0)

    @property
    def line(self) -> str:
        """e.g. "12 rows: 3 faster, 1 slower, 6 same, 2 unclear; status changes: 1 newly failing, 1 fixed"."""
        speeds = ", ".join(f"{self.count(c)} {c}" for c in SPEEDS)
        changes = ", ".join(f"{self.count(c)} {c}" for c in STATUS_CHANGES if self.count(c)) or "none"
        parts = [f"{plural(self.rows, 'row')}: {speeds}", f"status changes: {changes}"]
        if self.count(FAILING):
            parts.append(f"{self.count(FAILING)} failing in both runs")
        if self.count(NOT_RUN):
            parts.append(f"{self.count(NOT_RUN)} not run in either")
        parts += [f"{plural(n, 'problem')} only in the {side} run"
                  for side, n in (("before", self.only_before), ("after", self.only_after)) if n]
        return "; ".join(parts)


def verdict(rows: Sequence[Changed], only_before: OneRunOnly, only_after: OneRunOnly) -> ComparisonVerdict:
    counts = Counter(r.change for r in rows)
    return ComparisonVerdict(tuple(counts.items()), len(only_before.problems), len(only_after.problems))


def _never_ran(run: LoadedRun, verb: str) -> str:
    """How many problems of the run's header have no row, e.g. "3 of its 20 selected problems never ran"; "" when
    none is missing or the header lists none (a problem with rows may still lack some of its solutions)."""
    selected = list(run.doc.get("problems") or {})
    if not selected:
        return ""
    ran = {e.problem for e in run.evaluations}
    missing = sum(p not in ran for p in selected)
    if not missing:
        return ""
    return f"{missing} of its {plural(len(selected), 'selected problem')} {verb}"


def _why_incomplete(run: LoadedRun) -> str:
    process = recorded_process(run.doc)
    if run.doc.get("state") != "running":
        return "its file does not say that it finished"
    if process is None:
        return "it is still marked running but does not name its process, so it was probably stopped"
    if process.host != this_process().host:
        return f"it is still marked running, on host {process.host}, which this machine cannot check"
    return "its process is gone"


def run_warning(side: str, run: LoadedRun) -> str | None:
    """One line when a run did not finish: still running, interrupted, or incomplete (its process died)."""
    state, name = run_state(run.doc), f"the {side} run {run.label}"
    if state == "complete":
        return None
    if state == "running":
        missing = _never_ran(run, "have no rows yet")
        return f"{name} is still running" + (f": {missing}" if missing else "")
    if state == "interrupted":
        missing = _never_ran(run, "never ran")
        return f"{name} was interrupted" + (f": {missing}" if missing else "")
    missing = _never_ran(run, "never ran")
    return f"{name} is incomplete: {_why_incomplete(run)}" + (f" and {missing}" if missing else "")

