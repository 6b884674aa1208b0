"""How a child ends an evaluation early: a status with a message (no torch needed to import this)."""

from __future__ import annotations

from kbench.results.records import Status

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
