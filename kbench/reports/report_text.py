"""`kbench report`'s text (report.md, and the terminal): provenance, the caveats first, then each problem's ranking.

Every speedup says what it divided ("8.00x" beside the eager ms it came from), one within noise reads "≈1x" with
its interval (kbench.results.speedups), a baseline that was not measured reads "not measured", and every warning of
every row is kept as a numbered footnote under its problem's table, so that the table stays within WIDTH columns.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from kbench.reports import leaderboard
from kbench.reports.caveats import (
    NOT_MEASURED,
    caveats,
    compile_measured,
    headline,
    provenance,
    weakening,
)
from kbench.results.codec import JsonObject
from kbench.results.records import COMPILED, EAGER, Evaluation, Status, problem_order
from kbench.results.speedups import NOISE_BAND, of_row, over_compile, significant_fast_p
from kbench.results.storage import atomic_write, latest_run, load, resolve, run_state

WIDTH = 120  # columns a terminal line may take
DAGGER = "†"  # the mark of a headline whose verdict or number a warning, or a degenerate reference, weakens


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.3f}" if seconds is not None else ""


def _wrap(text: str, indent: str = "    ") -> list[str]:
    return textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False) or [""]


def speedup_cells(row: Evaluation, eager: Evaluation | None, compiled: Evaluation | None,
                  compile_run: bool) -> tuple[str, str, str]:
    """(vs eager, the eager ms it divided, vs torch.compile) of a row, as the report writes them."""
    if row.solution in (EAGER, COMPILED):
        return ("", "", "")
    s = of_row(row)
    if s is None:  # a failed row; a suspect one (its speedups withheld); a row of an old file without eager samples
        if row.status == Status.SUSPECT:
            return ("withheld", "", "withheld" if compile_run else NOT_MEASURED)
        if row.status != Status.CORRECT:
            return ("", "", "")
        legacy = lambda v: f"{v:.2f}x" if v is not None else ""  # noqa: E731
        return (legacy(row.speedup_vs_eager), "", legacy(row.speedup_vs_compile) if compile_run else NOT_MEASURED)
    c = over_compile(s, eager.timing if eager else None, compiled.timing if compiled else None) if compile_run else None
    return (s.label(), _ms(s.base_s), (c.label() if c else "") if compile_run else NOT_MEASURED)


def _span(numbers: list[str]) -> str:
    """Footnote numbers as the notes column shows them: consecutive ones as a range ("2-5")."""
    if len(numbers) > 2 and int(numbers[-1]) - int(numbers[0]) == len(numbers) - 1:
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(numbers)


# A warning whose code is on at least this many rows is said once for the run ("Notes on many rows") rather than under
# each problem: a suite's hundred honest copies of plain PyTorch, or twenty rows of 200 timed on a busy machine (a
# quarter of the rows was asked too until 2026-11-28: twenty such rows printed twenty footnotes).
RECURRING_ROWS = 10


def recurring(evaluations: Sequence[Evaluation]) -> dict[str, list[tuple[Evaluation, str]]]:
    """The warning codes that recur on many rows (RECURRING_ROWS), each with its rows and their warnings' texts."""
    by_code: dict[str, list[tuple[Evaluation, str]]] = {}
    for e in evaluations:
        for w in e.warnings:
            by_code.setdefault(w.code.value, []).append((e, w.message))
    return {code: rows for code, rows in by_code.items() if len(rows) >= RECURRING_ROWS}


def recurring_notes(evaluations: Sequence[Evaluation]) -> list[str]:
    """The run's recurring warnings, each once: its code, on how many rows (of which solutions), one of its texts."""
    lines = []
    for code, rows in sorted(recurring(evaluations).items(), key=lambda kv: -len(kv[1])):
        names = sorted({e.solution for e, _ in rows})
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        lines += _wrap(f"- [{code}] on {len(rows)} of {len(evaluations)} rows ({shown}); the first: {rows[0][1]}",
                       "      ")
    return lines


NOTES_CELL = 28  # characters a notes cell may take before its recurring codes are counted rather than named


def _notes_cell(footnotes: str, codes: Sequence[str]) -> str:
    """A row's notes cell: its footnote numbers, then the recurring warnings it has by code ("2, gpu_busy"); codes
    that would widen the table beyond NOTES_CELL are counted ("+2 recurring")."""
    for named in range(len(codes), -1, -1):
        more = [f"+{len(codes) - named} recurring"] if named < len(codes) else []
        cell = ", ".join(filter(None, [footnotes, *codes[:named], *more]))
        if len(cell) <= NOTES_CELL or named == 0:
            return cell
    return footnotes


def problem_table(evaluations: Sequence[Evaluation], problem: str, compile_run: bool,
                  folded: frozenset[str] = frozenset()) -> list[str]:
    """One problem's ranking: the table, then its footnotes (every warning of every row, numbered, but those whose
    code is in `folded`: the run's recurring ones, said once, which the row's notes cell names by their code)."""
    rows = leaderboard.ranked(evaluations, problem)
    eager = next((e for e in rows if e.solution == EAGER), None)
    compiled = next((e for e in rows if e.solution == COMPILED), None)
    best, weakened = headline(evaluations, problem)
    table: list[list[Any]] = []
    notes: list[str] = []
    for rank, e in enumerate(rows, start=1):
        marks = []
        for warning in (([e.message.splitlines()[0]] if e.message and e.status != Status.CORRECT else [])
                        + [w.text for w in e.warnings if w.code.value not in folded]):
            notes.append(f"[{len(notes) + 1}] {e.solution}: {warning}")
            marks.append(str(len(notes)))
        # a recurring warning is said once for the run, but the row still shows that it has it
        recurring_codes = [c for c in dict.fromkeys(w.code.value for w in e.warnings) if c in folded]
        name = e.solution + (f" {DAGGER}" if e is best and weakened else "")
        vs_eager, eager_ms, vs_compile = speedup_cells(e, eager, compiled, compile_run)
        table.append([rank, name, e.status.value, _ms(e.timing.median if e.timing else None), vs_eager, eager_ms,
                      vs_compile, f"{e.max_abs_err:.1e}" if e.max_abs_err is not None else "",
                      _notes_cell(_span(marks), recurring_codes)])
    headers = ["#", "solution", "status", "median ms", "vs eager", "eager ms", "vs compile", "max err", "notes"]
    if not compile_run:  # every cell would say "not measured": the suite's table and the box say it once
        headers, table = headers[:6] + headers[7:], [r[:6] + r[7:] for r in table]
    if len({e.gpu for e in rows if e.gpu is not None}) > 1:  # each row's GPU, where the problem's rows ran on several
        headers = [*headers[:3], "gpu", *headers[3:]]
        table = [[*r[:3], "" if e.gpu is None else str(e.gpu), *r[3:]] for r, e in zip(table, rows)]
    lines = [tabulate(table, headers=headers, tablefmt="github", disable_numparse=True)]
    own = weakening(best) if best is not None else []
    if weakened and own and not set(own) <= folded:  # else "Notes on many rows" says it
        lines += ["",
                  f"{DAGGER} the fastest correct solution carries a warning that weakens its verdict or its number."]
    elif weakened and not own:
        lines += ["", f"{DAGGER} the problem's reference tells right from wrong poorly (degenerate: see its eager "
                      "row), so a correct verdict here says little."]
    return lines + ([""] if notes else []) + [wrapped for note in notes for wrapped in _wrap(f"- {note}", "      ")]


def suite_table(doc: JsonObject, evaluations: Sequence[Evaluation]) -> list[str]:
    problems = sorted({e.problem for e in evaluations}, key=problem_order)
    strict = leaderboard.summarize(evaluations)
    significant = [significant_fast_p(evaluations, problems, p) for p in leaderboard.FAST_P]
    pct = lambda v: f"{v:.0%}"  # noqa: E731
    rows = [["vs eager: significant wins", *map(pct, significant), leaderboard.ratio_text(strict.geomean_eager)]]
    if (sound := leaderboard.sound_fast_p(evaluations, problems)) is not None:
        rows.append([f"the same without {sound[0]} degenerate", *map(pct, sound[1]), ""])
    rows.append(["vs eager: KernelBench's fast_p", *[pct(v) for _, v in strict.fast_p_eager], ""])
    measured = compile_measured(doc, evaluations)
    if measured:
        rows.append(["vs compile: KernelBench's fast_p", *[pct(v) for _, v in strict.fast_p_compile],
                     leaderboard.ratio_text(strict.geomean_compile)])
    table = tabulate(rows, headers=["baseline", *[f"fast_{p:g}" for p in leaderboard.FAST_P], "geomean"],
                     tablefmt="github", disable_numparse=True)
    solutions = [e for e in evaluations if e.solution not in (EAGER, COMPILED)]
    counts = Counter(e.status for e in solutions)
    verdicts = ", ".join(f"{counts[s]} {s.value}" for s in Status if counts[s]) or "none"
    rates = leaderboard.rates(evaluations)
    return [f"Verdicts of the {len(solutions)} solution row(s): {verdicts}" + (f"; {rates}." if rates else "."),
            "", table,
            *([] if measured else ["", f"vs torch.compile: {NOT_MEASURED} in this run."]), "", *_wrap(
        f"fast_p: the share of the {len(problems)} problem(s) with a correct solution more than p times faster than "
        "the baseline (fast_0: any correct solution). KernelBench's fast_p counts any ratio above p. A significant "
        f"win: the speedup's 95% interval lies above p and, for p >= 1, above 1 + {NOISE_BAND:g} (honest copies of "
        f"the reference measure within 1 ± {NOISE_BAND:g}); a speedup whose interval reaches that band wins nothing "
        "and reads "
        "≈1x when its interval holds 1, ~ and its ratio when not (~0.97x: within noise, but slower). The geomean is of "
        "each problem's best speedup.", "")]


def markdown(doc: JsonObject, evaluations: Sequence[Evaluation], state: str | None = None) -> str:
    """The whole report: provenance, "before you quote these numbers", the suite, then each problem."""
    lines = [f"# kbench report: run {doc.get('run_id', '?')}", "", "## Provenance", ""]
    lines += [w for k, v in provenance(doc, evaluations).lines() for w in _wrap(f"- {k}: {v}", "  ")]
    found = caveats(doc, evaluations, state)
    lines += ["", "## Before you quote these numbers", ""]
    lines += [w for line in found.lines() for w in _wrap(f"- {line}")] or [
        "Nothing to flag: no suspect row, no warning that weakens a correct row, every baseline measured, the run "
        "complete."]
    lines += ["", "## Suite", "", *suite_table(doc, evaluations)]
    folded = frozenset(recurring(evaluations))
    if folded:
        lines += ["", "## Notes on many rows", "", *_wrap(
            "Said once here, not under each problem: a row's notes name those it has by their code (run.json and the "
            f"HTML report keep every row's text); a {DAGGER} on a problem's fastest correct solution may mean one of "
            "these weakens it:", ""),
            *recurring_notes(evaluations)]
    compile_run = compile_measured(doc, evaluations)
    for problem in sorted({e.problem for e in evaluations}, key=problem_order):
        lines += ["", f"## {problem}", "", *problem_table(evaluations, problem, compile_run, folded)]
        lines += [w for line in leaderboard.noise_line(evaluations, problem) for w in _wrap(line, "")]
        if where := leaderboard.gpu_line(evaluations, problem):
            lines += ["", *_wrap(where, "")]
    return "\n".join(lines) + "\n"


def write_report(ref: str | None, results_dir: Path, with_chart: bool = True) -> tuple[Path, Path | None, str]:
    """Write report.md (and speedups.png) next to a run's run.json (default: the latest run).

    Returns (markdown path, chart path or None, markdown text).
    """
    run = load(resolve(ref, results_dir)) if ref else latest_run(results_dir, [])
    doc, evaluations = run.doc, run.evaluations
    directory = run.path if run.path.is_dir() else run.path.parent
    text = markdown(doc, evaluations, run_state(doc))
    md_path = directory / "report.md"
    atomic_write(md_path, text)
    png = leaderboard.chart(evaluations, directory / "speedups.png") if with_chart else None
    return md_path, png, text
