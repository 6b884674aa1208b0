"""What the HTML pages' templates are given (kbench.reports.html): typed views of a run and of a comparison."""

from __future__ import annotations

from typing import TypedDict

import markupsafe

from kbench.reports.compare import Row
from kbench.reports.strips import Chart
from kbench.results.codec import JsonObject
from kbench.results.figures import Floor
from kbench.results.records import Evaluation


class RowFigures(TypedDict):
    """What the page shows of a row beyond its typed figures: the timing protocol's figures and a suspect row's
    withheld speedups."""

    protocol: JsonObject | None  # as the run file holds it: shown flattened, key by key
    withheld: dict[str, float]


class CompilerLog(TypedDict):
    first_error: str | None
    text: str  # its first and last lines
    lines: int  # in the whole log


class Assets(TypedDict):
    css: str
    script: str
    script_hash: str  # the script's sha256, for the page's content security policy


class BoardRow(TypedDict):
    """One row of a problem's leaderboard: the results table's columns (kbench.reports.tables.COLUMNS; missing
    figures None), the row itself and its kind (reference, correct, suspect, failed)."""

    problem: str
    solution: str
    status: str
    size: str
    precision: str
    median_ms: float | None
    eager_ms: float | None
    vs_eager: float | None
    vs_compile: float | None
    floor_pct: float | None
    n: int | None
    ci_pct: float | None
    max_abs_err: float | None
    peak_mib: float | None
    compile_s: float | None
    notes: str
    e: Evaluation
    kind: str


class RankedRow(BoardRow):
    """A leaderboard row on the run's page: its anchor, the command that reruns it, its speedup cells, and whether it
    is the problem's headline (weakened: a warning weakens it)."""

    anchor: str
    repro: str
    speed: tuple[str, str, str]
    tone: str  # the speedup's: "win", "slower" (wholly below the noise band) or "" (within noise, none)
    headline: bool
    weakened: bool


class ProblemView(TypedDict):
    """A problem's section of the run's page."""

    name: str
    id: str
    info: JsonObject  # the run file's settings of the problem (tolerance, precision, sizes), as read
    noise: list[str]
    gpus: str  # where its rows ran, when on more than one GPU (leaderboard.gpu_line)
    rows: list[RankedRow]
    chart: Chart | None
    speedups: markupsafe.Markup | None
    floor: Floor | None
    best: RankedRow | None
    n_solutions: int
    n_correct: int


class ComparisonView(TypedDict):
    """A problem's section of the compare page: its rows, and both runs' samples of each."""

    name: str
    id: str
    rows: list[Row]
    chart: Chart | None
