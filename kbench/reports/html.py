"""`kbench report --html` and `kbench compare --html`: one self-contained HTML file (styles, script, charts inline)."""

from __future__ import annotations

import base64
import dataclasses
import functools
import gzip
import hashlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import jinja2
import markupsafe
import pandas as pd

from kbench.errors import ResultsError
from kbench.reports import caveats, leaderboard, profile_view, report_text, reproduce, speedup_chart, strips, tables
from kbench.reports.compare import MARKS, Comparison, Row, environment_key
from kbench.reports.html_views import Assets, BoardRow, ComparisonView, CompilerLog, ProblemView, RankedRow, RowFigures
from kbench.results import speedups
from kbench.results.codec import JsonObject, to_wire
from kbench.results.figures import PeakMemory
from kbench.results.records import COMPILED, EAGER, Evaluation, Status, problem_order
from kbench.results.storage import RUN_FILE, LoadedRun, atomic_write, latest_run, load, resolve, run_state
from kbench.system.toolkit import first_compiler_error

TEMPLATES = Path(__file__).with_name("templates")
REPORT_FILE = "report.html"
LOG_HEAD, LOG_TAIL = 40, 360  # lines of a long compiler log shown; run.json keeps it whole
MEANING = {  # what each status says, before the row's own message says why
    "correct": "every trial matched the reference within tolerance, and the timing passed its checks",
    "incorrect": "an output differed from the reference beyond the tolerance",
    "suspect": "the outputs pass, but the timing cannot be trusted: its speedups are left out",
    "compile_error": "the extension did not compile",
    "load_error": "the file could not be loaded (an import or syntax error, no ModelNew, or the file contract)",
    "runtime_error": "ModelNew raised an exception while running",
    "timeout": "the evaluation ran past --timeout and was stopped",
    "crashed": "the evaluation's process died (a signal, a CUDA fault, or no readable result)",
    "not_run": "not evaluated in this run",
}


def figures(e: Evaluation) -> RowFigures:
    """The timing protocol's figures and a suspect row's withheld speedups, as the page shows them (the other typed
    figures are read off the row itself)."""
    withheld = dataclasses.asdict(e.withheld) if e.withheld is not None else {}
    protocol = e.diagnostics.protocol
    return {"protocol": to_wire(protocol) if protocol is not None else None,
            "withheld": {k: v for k, v in withheld.items() if v is not None}}


def _number(value: Any, pattern: str) -> str:
    missing = value is None or (not isinstance(value, str) and bool(pd.isna(value)))
    return "" if missing else pattern.format(value)


# Names a reader knows, for run-file keys shown in the detail sections (the rest: underscores to spaces).
NAMES = {"trust_fp64": "fp64 check", "trust_determinism": "determinism check", "trust_profile": "kernel profile",
         "own": "own kernels", "own_share": "own kernels' share", "library": "library kernels", "fp64": "fp64 check",
         "other_sizes": "other sizes", "p50": "median", "p90": "90th percentile", "sm_mhz": "SM clock (MHz)",
         "max_sm_mhz": "SM clock, maximum (MHz)", "rechecked": "calls rechecked in full", "calibration": "calibration"}


def _name(key: str) -> str:
    words = []
    for part in key.split("."):
        base = (part[:-2] if part.endswith("_s") and part not in NAMES
                else part[:-6] if part.endswith("_bytes") else part)
        words.append(NAMES.get(part, NAMES.get(base, base.replace("_", " "))))
    return " / ".join(words)


def _value(key: str, value: Any) -> str:
    """A value in human units: seconds as ms or s, bytes as MiB, yes/no, four significant digits."""
    last = key.rsplit(".", 1)[-1]
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)) and last.endswith("_s"):
        return f"{value * 1e3:.4g} ms" if abs(value) < 1 else f"{value:.4g} s"
    if isinstance(value, (int, float)) and last.endswith("_bytes"):
        return f"{value / 2**20:.1f} MiB"
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def flatten(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Nested run-file fields or records as (name, text) pairs in human units, for the tables of key and value."""
    return [(_name(k), v) for k, v in _flat(data, prefix)]


def _flat(data: Any, prefix: str) -> list[tuple[str, str]]:
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = dataclasses.asdict(data)
    if isinstance(data, dict):
        return [pair for k, v in data.items() for pair in _flat(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(data, (list, tuple)) and not any(isinstance(v, (dict, list)) for v in data):
        if len(data) > 12 and all(isinstance(v, (int, float)) for v in data):  # per-call figures: their spread
            return [(prefix, f"{len(data)} values, median {_value(prefix, sorted(data)[len(data) // 2])}")]
        return [(prefix, ", ".join(_value(prefix, v) for v in data))]
    return [(prefix, _value(prefix, data))]


def trial_rows(e: Evaluation) -> list[tuple[str, Any]]:
    """(size, trial) of every correctness trial: the row's own size, then the other sizes checked."""
    return [(e.size, t) for t in e.trials] + [(size, t) for size, trials in e.size_checks.items() for t in trials]


def peaks(peak: PeakMemory | None) -> list[tuple[str, str]]:
    found = (("solution", peak.solution), ("reference", peak.reference)) if peak is not None else ()
    return [(f"peak memory, {who}", f"{value / 2**20:.1f} MiB") for who, value in found if value is not None]


def compiler_log(log: str) -> CompilerLog:
    """A compiler log as the report shows it: its first error, and its first LOG_HEAD and last LOG_TAIL lines (a
    build's errors come at its end)."""
    lines = log.splitlines()
    cut = len(lines) - LOG_HEAD - LOG_TAIL
    if cut > 0:
        lines = [*lines[:LOG_HEAD], f"... {cut} lines left out here: run.json has the whole log (compile.log) ...",
                 *lines[-LOG_TAIL:]]
    return {"first_error": first_compiler_error(log), "text": "\n".join(lines), "lines": len(log.splitlines())}


def breakable(name: str) -> markupsafe.Markup:
    """A long identifier (a KernelBench problem's name) escaped, with a line-break opportunity after each underscore."""
    return markupsafe.Markup("_<wbr>").join(markupsafe.escape(part) for part in str(name).split("_"))


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """Templates with autoescape on everywhere: solution text, warnings and logs reach the page only as text."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(
        ms=lambda s: _number(s * 1e3 if s is not None else None, "{:#.4g}"), x=lambda v: _number(v, "{:.2f}×"),
        pct=lambda v: _number(v, "{:.0f}%"), sci=lambda v: _number(v, "{:.2e}"), num=lambda v: _number(v, "{:.4g}"),
        plain=lambda v: _number(v, "{}"), firstline=lambda s: s.splitlines()[0] if s else "", breakable=breakable)
    env.globals.update(figures=figures, compiler_log=compiler_log, flatten=flatten, trial_rows=trial_rows, peaks=peaks,
                       meaning=MEANING, max_dots=strips.MAX_DOTS)
    return env


@functools.lru_cache(maxsize=1)
def _assets() -> Assets:
    """The style sheet and the script, inline; the page's content security policy lets only this script run."""
    script = (TEMPLATES / "sort.js").read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    return {"css": (TEMPLATES / "report.css").read_text(encoding="utf-8"), "script": script,
            "script_hash": f"sha256-{digest}"}


def render(template: str, **context: Any) -> str:
    assets = _assets()
    # Our own files, not a run's text: marked safe so the script's bytes match the hash in the policy.
    return environment().get_template(template).render(
        css=markupsafe.Markup(assets["css"]), script=markupsafe.Markup(assets["script"]),
        script_hash=assets["script_hash"], **context)


def _kind(e: Evaluation) -> str:
    if e.solution in (EAGER, COMPILED):
        return "reference"
    return {Status.CORRECT: "correct", Status.SUSPECT: "suspect"}.get(e.status, "failed")


def leaderboard_rows(rows: Sequence[Evaluation]) -> list[BoardRow]:
    """The results table's figures (kbench.reports.tables) of ranked rows, missing values as None."""
    frame = tables.results_frame(rows)
    out = []
    for e, record in zip(rows, frame.to_dict("records")):
        clean = {k: None if not isinstance(v, str) and _number(v, "{}") == "" else v for k, v in record.items()}
        out.append(cast(BoardRow, {**clean, "e": e, "kind": _kind(e)}))  # clean: a row of tables.COLUMNS
    return out


def _tone(row: Evaluation) -> str:
    """A solution's speedup as its cell is coloured: a win, a slowdown, or neither (kbench.results.speedups)."""
    if row.solution in leaderboard.BASELINE_ROWS or row.status != Status.CORRECT:
        return ""
    s = speedups.of_row(row)
    return s.tone if s is not None else ""


def problem_view(doc: JsonObject, evaluations: Sequence[Evaluation], problem: str, index: int) -> ProblemView:
    ranked = leaderboard.ranked(evaluations, problem)
    eager = next((e for e in ranked if e.solution == EAGER), None)
    compiled = next((e for e in ranked if e.solution == COMPILED), None)
    measured = caveats.compile_measured(doc, evaluations)
    best, weakened = caveats.headline(evaluations, problem)
    rows: list[RankedRow] = [{**row, "anchor": f"p{index}-{j}", "repro": reproduce.run_command(row["e"], doc),
             "speed": report_text.speedup_cells(row["e"], eager, compiled, measured),
             "tone": _tone(row["e"]),
             "headline": row["e"] is best, "weakened": row["e"] is best and weakened}
            for j, row in enumerate(leaderboard_rows(ranked))]
    chart = strips.chart(chart_rows(ranked))
    solutions = [r for r in rows if r["solution"] not in leaderboard.BASELINE_ROWS]
    return {"name": problem, "id": f"p{index}", "info": (doc.get("problems") or {}).get(problem, {}),
            "noise": leaderboard.noise_line(evaluations, problem), "gpus": leaderboard.gpu_line(evaluations, problem),
            "rows": rows, "chart": chart,
            "speedups": speedup_svg(rows), "floor": eager.floor if eager is not None else None,
            "best": next((r for r in solutions if r["headline"]), None), "n_solutions": len(solutions),
            "n_correct": sum(r["kind"] == "correct" for r in solutions)}


def chart_rows(ranked: Sequence[Evaluation]) -> list[tuple[str, str, tuple[float, ...]]]:
    """The samples chart's rows of a problem: each ranked row's own samples, and under each solution the eager that
    its speedup divides (the judge's eager of the same rounds, on that solution's GPU; the eager row may have run on
    another GPU and at another time), so that the chart shows the two numbers each speedup is made of."""
    out: list[tuple[str, str, tuple[float, ...]]] = []
    for e in ranked:
        out.append((e.solution, _kind(e), e.timing.samples if e.timing else ()))
        if e.solution not in leaderboard.BASELINE_ROWS and e.eager_timing is not None and e.timing is not None:
            out.append((f"eager beside {e.solution}", "reference", e.eager_timing.samples))
    return out


def speedup_svg(rows: Sequence[BoardRow]) -> markupsafe.Markup | None:
    """The problem's speedups vs eager with their intervals, as an inline SVG (kbench.reports.speedup_chart)."""
    found = [(r["solution"], s.value, s.low, s.high, r["kind"]) for r in rows
             if r["solution"] not in leaderboard.BASELINE_ROWS and (s := speedups.of_row(r["e"])) is not None]
    chart = speedup_chart.speedup_chart(found) if found else None
    return markupsafe.Markup(speedup_chart.speedup_svg(chart)) if chart is not None else None


def report_html(doc: JsonObject, evaluations: Sequence[Evaluation], state: str | None = None) -> str:
    """The run's page: environment, configuration, suite summary, and per problem a leaderboard, a chart of the
    samples and a section per row."""
    problems = sorted({e.problem for e in evaluations}, key=problem_order)
    views = [problem_view(doc, evaluations, p, i) for i, p in enumerate(problems)]
    anchors = {(r["e"].problem, r["e"].solution): r["anchor"] for v in views for r in v["rows"]}
    solutions = [e for e in evaluations if e.solution not in leaderboard.BASELINE_ROWS]
    counts = Counter(e.status for e in solutions)
    found = caveats.caveats(doc, evaluations, state)
    sections = pack_sections(render("problems.html.j2", problems=views))
    return render(
        "report.html.j2", doc=doc, summary=leaderboard.summarize(evaluations), fast_p=leaderboard.FAST_P,
        significant=[speedups.significant_fast_p(evaluations, problems, p) for p in leaderboard.FAST_P],
        sound=leaderboard.sound_fast_p(evaluations, problems),
        compile_measured=caveats.compile_measured(doc, evaluations), caveats=found,
        provenance=caveats.provenance(doc, evaluations), weakening=caveats.WEAKENING, fold=caveats.FOLD_NAMES,
        suspicion=caveats.suspicion_words,
        degenerate=caveats.DEGENERATE,
        noise_band=speedups.NOISE_BAND,
        counts=[(s.value, counts[s]) for s in Status if counts[s]], n_solutions=len(solutions),
        rates=leaderboard.rates(evaluations),
        suspects=[e for e in solutions if e.status == Status.SUSPECT],
        references=[e for e in evaluations if e.solution in leaderboard.BASELINE_ROWS and e.status != Status.CORRECT],
        environment=flatten(doc.get("environment") or {}), git=flatten(doc.get("git") or {}),
        config=flatten(doc.get("config") or {}), selection=flatten(doc.get("selection") or {}),
        problems=views, anchors=anchors, problem_ids={v["name"]: v["id"] for v in views},
        profiles=profile_view.section(doc), sections=sections)


# The problems' sections (a leaderboard, two charts and a card of figures per row: 14 KB a problem on a real level-2
# run, 1.5 MB for 100 problems) go into the page gzipped and base64-encoded, and its script inflates them on load
# (DecompressionStream): repetitive markup shrinks about tenfold, so a 250-problem run stays under a megabyte.
SECTIONS_ID = "problem-data"


def pack_sections(sections: str) -> str:
    """The problems' sections as the page stores them: gzip (no timestamp: the same run gives the same page), then
    base64."""
    return base64.b64encode(gzip.compress(sections.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")


def embedded_sections(page: str) -> str:
    """The problems' sections of a report page, as its script shows them (tests, tools that read the page)."""
    start = page.index(">", page.index(f'id="{SECTIONS_ID}"')) + 1
    data = page[start:page.index("</script>", start)]
    return gzip.decompress(base64.b64decode(data)).decode("utf-8")


def _directory(run: LoadedRun) -> Path:
    return run.path if run.path.is_dir() else run.path.parent


def _write(path: Path, text: str) -> Path:
    try:
        atomic_write(path, text)
    except OSError as exc:
        raise ResultsError(f"Cannot write {path}: {exc.strerror or exc}") from None
    return path


def write_html_report(ref: str | None, results_dir: Path) -> Path:
    """Write report.html next to a run's run.json (default: the latest run), or NAME.html next to a run file of
    another name (a baseline's NAME.json); returns its path."""
    run = load(resolve(ref, results_dir)) if ref else latest_run(results_dir, [])
    named = not run.path.is_dir() and run.path.name != RUN_FILE
    path = run.path.with_suffix(".html") if named else _directory(run) / REPORT_FILE
    return _write(path, report_html(run.doc, run.evaluations, run_state(run.doc)))


def _samples(run: LoadedRun) -> dict[tuple[str, str, str], tuple[float, ...]]:
    """A run's raw samples by (problem, solution, size), as compare's rows name them."""
    return {(e.problem, e.solution, e.size): e.timing.samples for e in run.evaluations if e.timing is not None}


def comparison_view(comparison: Comparison, shown: Sequence[Row]) -> list[ComparisonView]:
    """Per problem of the rows `shown`: its rows, and a chart with both runs' samples of each row (before above
    after)."""
    before, after = _samples(comparison.before), _samples(comparison.after)
    out: list[ComparisonView] = []
    for i, problem in enumerate(dict.fromkeys(r.problem for r in shown)):
        rows = [r for r in shown if r.problem == problem]
        sized = len({r.size for r in rows}) > 1
        series = []
        for r in rows:
            key, label = (r.problem, r.solution, r.size), f"{r.solution} {r.size}" if sized else r.solution
            series += [(f"{label} (before)", "before", before.get(key, ()) if r.before_status else ()),
                       (f"{label} (after)", _css(r.change), after.get(key, ()) if r.after_status else ())]
        out.append({"name": problem, "id": f"p{i}", "rows": rows, "chart": strips.chart(series)})
    return out


def _css(change: str) -> str:
    return change.replace(" ", "-")


def compare_html(comparison: Comparison, changes_only: bool = False) -> str:
    """The comparison's page: both machines, the verdict and the suite's line, the changes counted, then its rows
    (only those that changed with `changes_only`, as `kbench compare --changes-only` lists them) with both runs'
    speedups over their own eager, and a chart per problem."""
    counts = Counter(r.change for r in comparison.rows)
    shown = comparison.changes if changes_only else comparison.rows
    return render("compare.html.j2", c=comparison, counts=[(c, counts[c]) for c in MARKS if counts[c]],
                  change_class=_css, machine=lambda run: "{}, torch {}".format(*environment_key(run)),
                  rows=shown, changes_only=changes_only, left_out=len(comparison.rows) - len(shown),
                  problems=comparison_view(comparison, shown))


def write_html_compare(comparison: Comparison, changes_only: bool = False) -> Path:
    """Write compare-<before>.html next to the after run's run.json; returns its path."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in comparison.before.label)
    return _write(_directory(comparison.after) / f"compare-{safe}.html", compare_html(comparison, changes_only))
