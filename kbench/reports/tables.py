"""Records to tables: a pandas frame, rendered for the terminal (120 columns, footnotes), CSV and markdown."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd
from tabulate import tabulate

from kbench.reports.compare_summary import SAME
from kbench.results.records import COMPILED, EAGER, Evaluation, problem_order
from kbench.results.storage import RunStore, atomic_write

if TYPE_CHECKING:
    from kbench.build.compile import BuildResult
    from kbench.reports.compare import Row

FORMATS = ("table", "md", "csv", "json")

COLUMNS = [
    "problem", "solution", "status", "size", "precision", "calls", "median_ms", "eager_ms", "vs_eager", "vs_compile",
    "floor_pct", "n", "ci_pct", "max_abs_err", "peak_mib", "compile_s", "gpu", "gpu_name", "notes",
]
CALLS_BACKWARD = "forward+backward"  # the calls column of a --backward row (empty: the forward alone)
WIDTH = 120  # the widest line of a table for the terminal, footnotes included
NOTE_PARTS = "note_parts"  # results_frame's attrs: each row's message and warnings apart, by index (the footnotes)


def note_parts(e: Evaluation) -> tuple[str, ...]:
    """The row's message and each of its warnings, in full, each on one line."""
    return tuple(" ".join(p.split()) for p in (e.message, *(w.text for w in e.warnings)) if p and p.strip())


def _row(e: Evaluation) -> dict[str, object]:
    row: dict[str, object] = dict.fromkeys(COLUMNS)
    row.update(problem=e.problem, solution=e.solution, status=e.status.value, size=e.size, precision=e.precision,
               calls=CALLS_BACKWARD if e.backward else "", notes="; ".join(note_parts(e)))
    if e.timing is not None:
        summary = e.timing.summary()
        row["median_ms"] = summary["median"] * 1e3
        row["n"] = summary["n"]
        row["ci_pct"] = (100 * max(summary["median"] - summary["ci_low"], summary["ci_high"] - summary["median"])
                         / summary["median"])
    if e.eager_timing is not None:
        row["eager_ms"] = e.eager_timing.median * 1e3
    row["vs_eager"] = e.speedup_vs_eager
    row["vs_compile"] = e.speedup_vs_compile
    row["max_abs_err"] = e.max_abs_err
    row["floor_pct"] = e.percent_of_floor
    row["peak_mib"] = peak / 2**20 if (peak := peak_bytes(e)) is not None else None
    if e.compile is not None:
        row["compile_s"] = e.compile.seconds
    row["gpu"], row["gpu_name"] = e.gpu, e.gpu_name  # where runs are spread over GPUs
    return row


def peak_bytes(e: Evaluation) -> int | None:
    """The most GPU memory one call of the row's model allocated beyond what was allocated before it."""
    if e.peak is None:
        return None
    return e.peak.solution if e.solution not in (EAGER, COMPILED) else e.peak.reference


def row_order(e: Evaluation) -> tuple[object, ...]:
    """Rows as a reader looks for them: problems by their numbers, then the eager row, torch.compile's, and the
    solutions by name (a run on several GPUs stores them as they finish)."""
    return problem_order(e.problem), {EAGER: 0, COMPILED: 1}.get(e.solution, 2), e.solution


def run_table(evaluations: Sequence[Evaluation]) -> pd.DataFrame:
    """A run's table (the terminal's after `kbench run`, results.csv, results.md): its rows in `row_order`."""
    return results_frame(sorted(evaluations, key=row_order))


def results_frame(evaluations: Sequence[Evaluation]) -> pd.DataFrame:
    """The rows' frame, in the order given (a report may have ranked them)."""
    frame = pd.DataFrame([_row(e) for e in evaluations], columns=COLUMNS)
    frame["n"] = frame["n"].astype("Int64")  # a count, also where some rows have none (never 644.0 in the CSV)
    frame.attrs[NOTE_PARTS] = {i: note_parts(e) for i, e in enumerate(evaluations)}
    return frame


RESULT_FORMATS = {
    "median_ms": "{:.3f}", "eager_ms": "{:.3f}", "vs_eager": "{:.2f}x", "vs_compile": "{:.2f}x",
    "ci_pct": "±{:.1f}%", "floor_pct": "{:.0f}%", "max_abs_err": "{:.1e}", "peak_mib": "{:.0f}", "compile_s": "{:.1f}",
    "n": "{:.0f}",
}
COMPARISON_FORMATS = {"before_ms": "{:.3f}", "after_ms": "{:.3f}", "ratio": "{:.3f}", "before_x": "{:.2f}x",
                      "after_x": "{:.2f}x", "x_ratio": "{:.3f}", "p_value": "{:.2g}"}


def _formatted(frame: pd.DataFrame, patterns: dict[str, str]) -> pd.DataFrame:
    """Numbers as display strings (empty where missing), for tables people read."""
    shown = frame.copy()
    for column, pattern in patterns.items():
        if column in shown:
            shown[column] = [pattern.format(v) if v is not None and pd.notna(v) else "" for v in shown[column]]
    return shown.fillna("")


def _display(frame: pd.DataFrame) -> pd.DataFrame:
    return _formatted(frame, RESULT_FORMATS)


def to_markdown(frame: pd.DataFrame) -> str:
    shown = _display(frame)
    shown["notes"] = [n.replace("|", "\\|") for n in shown["notes"]]  # a | in a warning would end the cell
    return tabulate(shown, headers="keys", tablefmt="github", showindex=False, disable_numparse=True)


# The terminal table's headers (on two lines where a name is long), and the columns that leave first when the table
# would be wider than WIDTH (results.csv keeps them all); problem, solution and status always stay.
HEADERS = {"precision": "prec", "median_ms": "median\nms", "eager_ms": "eager\nms", "vs_eager": "vs\neager",
           "vs_compile": "vs\ncompile", "floor_pct": "floor", "ci_pct": "ci", "max_abs_err": "max\nerr",
           "peak_mib": "peak\nMiB", "compile_s": "compile\ns", "gpu_name": "gpu\nmodel"}
LEAVE_FIRST = ("gpu_name", "compile_s", "peak_mib", "n", "eager_ms", "floor_pct", "ci_pct", "size", "precision",
               "calls", "max_abs_err", "vs_compile", "vs_eager", "median_ms", "notes")
SHARED = ("size", "precision", "calls", "gpu", "gpu_name")  # a column every row agrees on: a line above the table
# aligned left; figures align right
TEXT = ("problem", "solution", "status", "size", "precision", "calls", "gpu", "gpu_name", "notes")


def grid(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] = ()) -> str:
    """A plain table: columns two spaces apart and a rule of dashes under the headers. A header or a cell may hold
    several lines ("\\n"); headers sit on their last line; `right[i]` aligns column i to the right."""
    heads = [h.split("\n") for h in headers]
    body = [[str(c).split("\n") for c in row] for row in rows]
    widths = [max(len(line) for cell in [heads[i], *(r[i] for r in body)] for line in cell) for i in range(len(heads))]
    depth = max((len(h) for h in heads), default=1)
    heads = [[""] * (depth - len(h)) + h for h in heads]

    def lines(cells: list[list[str]]) -> list[str]:
        out = []
        for k in range(max((len(c) for c in cells), default=0)):
            texts = [c[k] if k < len(c) else "" for c in cells]
            out.append("  ".join(t.rjust(w) if i < len(right) and right[i] else t.ljust(w)
                                 for i, (t, w) in enumerate(zip(texts, widths))).rstrip())
        return out

    return "\n".join(lines(heads) + ["  ".join("-" * w for w in widths)] + [x for row in body for x in lines(row)])


def _footnotes(shown: pd.DataFrame, parts: dict[object, tuple[str, ...]], width: int) -> tuple[list[str], list[str]]:
    """Each row's footnote numbers ("1, 2") and the footnotes: `[n] problem/solution: text`, wrapped at `width`."""
    marks: list[str] = []
    notes: list[str] = []
    for index, row in shown.iterrows():
        texts = parts.get(index, (row["notes"],) if row["notes"] else ())
        numbers = range(len(notes) + 1, len(notes) + 1 + len(texts))
        marks.append(", ".join(map(str, numbers)))
        notes += [textwrap.fill(f"[{n}] {row['problem']}/{row['solution']}: {text}", width, break_on_hyphens=False,
                                subsequent_indent=" " * len(f"[{n}] ")) for n, text in zip(numbers, texts)]
    return marks, notes


def _table(shown: pd.DataFrame, columns: Sequence[str]) -> str:
    return grid([HEADERS.get(c, c) for c in columns], shown[list(columns)].values.tolist(),
                [c not in TEXT for c in columns])


def _blocks(shown: pd.DataFrame, columns: Sequence[str], width: int) -> str:
    """One row per block, for names too long for any table: `problem/solution`, then its figures, wrapped."""
    out = []
    for _, row in shown.iterrows():
        figures = ", ".join(f"{c} {row[c]}" for c in columns if c not in ("problem", "solution") and row[c] != "")
        out.append("\n".join([f"{row['problem']}/{row['solution']}", *textwrap.wrap(
            figures, width, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)]))
    return "\n".join(out)


def to_terminal(frame: pd.DataFrame, width: int = WIDTH) -> str:
    """The run's table for a terminal, no line over `width` columns: each row's message and warnings in full as
    numbered footnotes under the table (its notes column holds their numbers), the columns every row shares as a line
    above it, and, where it would still be too wide, the columns least needed left out (named under it), or one row
    per block when even the names do not fit."""
    shown = _display(frame)
    shown["notes"], footnotes = _footnotes(shown, frame.attrs.get(NOTE_PARTS) or {}, width)
    shared = [c for c in SHARED if len(shown) and shown[c].nunique() == 1 and shown[c].iloc[0] != ""]
    keep = [c for c in COLUMNS if c not in shared and (c in TEXT[:3] or (shown[c] != "").any())]
    columns, left_out = list(keep), []
    text = _table(shown, columns)
    for column in LEAVE_FIRST:
        if max(map(len, text.splitlines())) <= width:
            break
        if column in columns:
            columns.remove(column)
            left_out.append(column)
            text = _table(shown, columns)
    if max(map(len, text.splitlines())) > width:
        text, left_out = _blocks(shown, keep, width), []
    lines = [", ".join(f"{c} {shown[c].iloc[0]}" for c in shared) + " (every row)"] if shared else []
    lines.append(text)
    if left_out:
        lines.append(textwrap.fill(f"left out for width: {', '.join(left_out)} (results.csv has every column)", width))
    return "\n".join(lines + (["", *footnotes] if footnotes else []))


def build_table(results: Sequence[BuildResult]) -> str:
    rows = [
        [r.solution.problem, r.solution.name, ", ".join(r.solution.devices), r.status,
         "yes" if r.compile.cached else "", f"{r.compile.seconds:.1f}", r.message.splitlines()[0] if r.message else ""]
        for r in results
    ]
    return tabulate(rows, headers=["problem", "solution", "devices", "build", "cached", "seconds", "message"],
                    tablefmt="simple")


COMPARISON_COLUMNS = ["mark", "problem", "solution", "size", "change", "before_ms", "after_ms", "ratio", "before_x",
                      "after_x", "x_ratio", "p_value", "before_status", "after_status"]


def comparison_frame(rows: Sequence[Row]) -> pd.DataFrame:
    """A comparison's rows: the times and their ratio, each side's speedup over its own run's eager and their ratio
    (what compares across machines), the test's p-value and the statuses."""
    return pd.DataFrame(
        [{"mark": r.mark, "problem": r.problem, "solution": r.solution, "size": r.size, "change": r.change,
          "before_ms": r.before_ms, "after_ms": r.after_ms, "ratio": r.ratio, "before_x": r.before_x,
          "after_x": r.after_x, "x_ratio": r.x_ratio, "p_value": r.p_value, "before_status": r.before_status,
          "after_status": r.after_status} for r in rows],
        columns=COMPARISON_COLUMNS,
    )


# A comparison read by a person (the terminal and markdown; csv and json keep every row and column): at most this wide
# a problem's name before it wraps, and the terminal's headers on two lines (a 100-problem comparison in 120 columns)
PROBLEM_WRAP = 32
COMPARISON_HEADERS = {"before_ms": "before\nms", "after_ms": "after\nms", "before_x": "before\nx",
                      "after_x": "after\nx", "x_ratio": "x\nratio", "p_value": "p", "before_status": "before\nstatus",
                      "after_status": "after\nstatus"}


def readable_comparison(rows: Sequence[Row]) -> tuple[pd.DataFrame, list[str]]:
    """What `kbench compare` prints for a person: the reference rows (eager, torch.compile) that stayed the same are
    left out and counted (their speedup is 1 by definition; their times are in csv and json), and a column whose
    every cell says the same (the size; the statuses where none changed) becomes a line under the table. Returns the
    frame and those lines."""
    kept = [r for r in rows if not (r.solution in (EAGER, COMPILED) and r.change == SAME)]
    notes = []
    if folded := len(rows) - len(kept):
        notes.append(f"{folded} reference row(s) (eager, torch.compile) the same in both runs, not listed "
                     "(--format csv lists every row)")
    frame = comparison_frame(kept).drop(columns=["mark"])  # the change says it in words
    if len(kept) and frame["size"].nunique() == 1:
        notes.append(f"size: {frame['size'].iloc[0]} on every row")
        frame = frame.drop(columns=["size"])
    if len(kept) and (frame["before_status"] == frame["after_status"]).all():
        if frame["after_status"].nunique() == 1:
            notes.append(f"status: {frame['after_status'].iloc[0]} in both runs on every row")
            frame = frame.drop(columns=["before_status", "after_status"])
        else:
            frame = frame.drop(columns=["before_status"]).rename(columns={"after_status": "status"})
    return frame, notes


def render(frame: pd.DataFrame, fmt: str) -> str:
    """A frame as a terminal table, markdown, CSV or JSON (records)."""
    if fmt == "csv":
        return frame.to_csv(index=False)
    if fmt == "json":
        return frame.to_json(orient="records", indent=1)
    shown = _formatted(frame, COMPARISON_FORMATS)
    style = "github" if fmt == "md" else "simple"
    if fmt == "table":  # a long KernelBench name wraps after an underscore rather than widening every line
        if "problem" in shown:
            shown["problem"] = [wrap_name(name, PROBLEM_WRAP) for name in shown["problem"]]
        shown = shown.rename(columns=COMPARISON_HEADERS)
    return tabulate(shown, headers="keys", tablefmt=style, showindex=False, disable_numparse=True)


def terminal_line(text: str) -> str:
    """A line of prose for the terminal, wrapped at WIDTH (continuation lines indented)."""
    return textwrap.fill(text, WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)


def wrap_name(name: str, width: int) -> str:
    """A name on lines of at most `width` characters, broken after underscores (within a word only where a word
    alone is longer)."""
    lines = [""]
    for word in (w + "_" for w in name.split("_")):
        if lines[-1] and len(lines[-1]) + len(word) > width:
            lines.append("")
        lines[-1] += word
    lines[-1] = lines[-1][:-1]
    return "\n".join(part for line in lines for part in textwrap.wrap(line, width) or [""])


def write_tables(store: RunStore) -> None:
    """results.csv and results.md beside a run's run.json."""
    frame = run_table(store.evaluations)
    atomic_write(store.directory / "results.csv", frame.to_csv(index=False))
    atomic_write(store.directory / "results.md", to_markdown(frame) + "\n")
