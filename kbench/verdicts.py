"""How a child ends an evaluation early: a status with a message (no torch needed to import this)."""

from __future__ import annotations

MAX_MESSAGE = 4000


class Verdict(Exception):
    """Ends the evaluation early with a status and a message."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def short(exc: BaseException) -> str:
    """`Type: message`, cut to MAX_MESSAGE characters."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " ..."
