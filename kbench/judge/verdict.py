"""The verdict: where a row's status is decided, once (no torch needed to import this).

An evaluation ends early with a `Verdict` (load_error, runtime_error, timeout, ...) raised where it is found, or runs
to the end, where `decide` turns what the judge found (its trials' outcome and every finding: its own, the timing's,
the floor's) into the row's status, message and speedups. Nothing later changes a status: the parent adds where the
row ran, the build's findings (heuristics of the source, which decide nothing) and a hint of what to do next.
A child that died before it answered is `timeout` or `crashed` (kbench.execution.child), decided there alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kbench.results.findings import Finding
from kbench.results.records import Speedups, Status

MAX_MESSAGE = 4000
NO_MODELNEW = ("the solution defines no class ModelNew: add `class ModelNew(nn.Module)` whose constructor takes the "
               "problem's get_init_inputs() and whose forward takes its get_inputs()")


def syntax_error(exc: SyntaxError) -> str:
    return f"SyntaxError: {exc.msg} (line {exc.lineno}): the file is not valid Python; fix that line"


class Verdict(Exception):
    """Ends the evaluation early with a status and a message."""

    def __init__(self, status: Status | str, message: str) -> None:
        """`status` as a Status, or its value (a reply's, checked against kbench.judge.candidate.protocol.STATUSES)."""
        super().__init__(message)
        self.status = Status(status)
        self.message = message


def short(exc: BaseException) -> str:
    """`Type: message`, cut to MAX_MESSAGE characters."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " ..."


NONE = Speedups()  # a row without speedups


@dataclass(frozen=True)
class Decision:
    """A row's status and message, the speedups it shows, and those it withholds (a `suspect` row's)."""

    status: Status
    message: str = ""
    speedups: Speedups = NONE
    withheld: Speedups | None = None


def decide(judged: Status, message: str, findings: Sequence[Finding], speedups: Speedups = NONE) -> Decision:
    """The row's status from the judge's outcome (`judged`: correct or incorrect) and every finding: outputs that
    pass with a finding that the timing cannot be trusted (kbench.results.findings.SUSPECT) make a `suspect` row,
    whose samples stay and whose speedups are withheld; heuristic findings never change a status."""
    reasons = [f for f in findings if f.code.suspect]
    if judged != Status.CORRECT:
        return Decision(judged, message)
    if reasons:
        return Decision(Status.SUSPECT, f"outputs pass, timing not trusted: {reasons[0].text}", withheld=speedups)
    return Decision(Status.CORRECT, message, speedups)
