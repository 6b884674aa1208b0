"""Records to tables: a pandas frame, rendered for the terminal (tabulate), CSV and markdown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd
from tabulate import tabulate

from kbench.results.records import COMPILED, EAGER, Evaluation
from kbench.results.storage import RunStore, atomic_write

if TYPE_CHECKING:
    from kbench.build.compile import BuildResult
    from kbench.reports.compare import Row

FORMATS = ("table", "md", "csv", "json")

COLUMNS = [
    "problem", "solution", "status", "size", "precision", "median_ms", "eager_ms", "vs_eager", "vs_compile", "floor_pct",
    "n", "ci_pct", "max_abs_err", "peak_mib", "compile_s", "notes",
]
NOTE_CHARS = 120


def _note(e: Evaluation) -> str:
    parts = [e.message] if e.message else []
    parts += list(e.warnings)
    text = "; ".join(p.splitlines()[0] for p in parts if p)
    return text if len(text) <= NOTE_CHARS else text[: NOTE_CHARS - 3] + "..."


def _row(e: Evaluation) -> dict[str, object]:
    row: dict[str, object] = {c: None for c in COLUMNS}
    row.update(problem=e.problem, solution=e.solution, status=e.status.value, size=e.size, precision=e.precision,
               notes=_note(e))
    if e.timing is not None:
        summary = e.timing.summary()
        row["median_ms"] = summary["median"] * 1e3
        row["n"] = summary["n"]
        row["ci_pct"] = 100 * max(summary["median"] - summary["ci_low"], summary["ci_high"] - summary["median"]) / summary["median"]
    if e.eager_timing is not None:
        row["eager_ms"] = e.eager_timing.median * 1e3
    row["vs_eager"] = e.speedup_vs_eager
    row["vs_compile"] = e.speedup_vs_compile
    row["max_abs_err"] = e.max_abs_err
    row["floor_pct"] = e.percent_of_floor
    row["peak_mib"] = peak_bytes(e) / 2**20 if peak_bytes(e) is not None else None
    if e.compile is not None:
        row["compile_s"] = e.compile.seconds
    return row


def peak_bytes(e: Evaluation) -> int | None:
    """The most GPU memory one call of the row's model allocated beyond what was allocated before it."""
    if e.peak is None:
        return None
    return e.peak.solution if e.solution not in (EAGER, COMPILED) else e.peak.reference


def results_frame(evaluations: Sequence[Evaluation]) -> pd.DataFrame:
    frame = pd.DataFrame([_row(e) for e in evaluations], columns=COLUMNS)
    frame["n"] = frame["n"].astype("Int64")  # a count, also where some rows have none (never 644.0 in the CSV)
    return frame


RESULT_FORMATS = {
    "median_ms": "{:.3f}", "eager_ms": "{:.3f}", "vs_eager": "{:.2f}x", "vs_compile": "{:.2f}x",
    "ci_pct": "±{:.1f}%", "floor_pct": "{:.0f}%", "max_abs_err": "{:.1e}", "peak_mib": "{:.0f}", "compile_s": "{:.1f}", "n": "{:.0f}",
}
COMPARISON_FORMATS = {"before_ms": "{:.3f}", "after_ms": "{:.3f}", "ratio": "{:.3f}", "p_value": "{:.2g}"}


def _formatted(frame: pd.DataFrame, patterns: dict[str, str]) -> pd.DataFrame:
    """Numbers as display strings (empty where missing), for tables people read."""
    shown = frame.copy()
    for column, pattern in patterns.items():
        if column in shown:
            shown[column] = [pattern.format(v) if v is not None and pd.notna(v) else "" for v in shown[column]]
    return shown.fillna("")


def _display(frame: pd.DataFrame) -> pd.DataFrame:
    return _formatted(frame, RESULT_FORMATS)


def to_terminal(frame: pd.DataFrame) -> str:
    return tabulate(_display(frame), headers="keys", tablefmt="simple", showindex=False, disable_numparse=True)


def to_markdown(frame: pd.DataFrame) -> str:
    return tabulate(_display(frame), headers="keys", tablefmt="github", showindex=False, disable_numparse=True)


def build_table(results: Sequence[BuildResult]) -> str:
    rows = [
        [r.solution.problem, r.solution.name, ", ".join(r.solution.devices), r.status,
         "yes" if r.compile.cached else "", f"{r.compile.seconds:.1f}", r.message.splitlines()[0] if r.message else ""]
        for r in results
    ]
    return tabulate(rows, headers=["problem", "solution", "devices", "build", "cached", "seconds", "message"], tablefmt="simple")


def comparison_frame(rows: Sequence[Row]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"mark": r.mark, "problem": r.problem, "solution": r.solution, "size": r.size, "change": r.change,
          "before_ms": r.before_ms, "after_ms": r.after_ms, "ratio": r.ratio, "p_value": r.p_value,
          "before_status": r.before_status, "after_status": r.after_status} for r in rows],
        columns=["mark", "problem", "solution", "size", "change", "before_ms", "after_ms", "ratio", "p_value",
                 "before_status", "after_status"],
    )


def render(frame: pd.DataFrame, fmt: str) -> str:
    """A frame as a terminal table, markdown, CSV or JSON (records)."""
    if fmt == "csv":
        return frame.to_csv(index=False)
    if fmt == "json":
        return frame.to_json(orient="records", indent=1)
    shown = _formatted(frame, COMPARISON_FORMATS)
    style = "github" if fmt == "md" else "simple"
    return tabulate(shown, headers="keys", tablefmt=style, showindex=False, disable_numparse=True)


def write_tables(store: RunStore) -> None:
    """results.csv and results.md beside a run's run.json."""
    frame = results_frame(store.evaluations)
    atomic_write(store.directory / "results.csv", frame.to_csv(index=False))
    atomic_write(store.directory / "results.md", to_markdown(frame) + "\n")
