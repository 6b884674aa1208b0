"""A child process's lifetime: tied to its parent's, and how it ended."""

from __future__ import annotations

import ctypes
import signal

from kbench.results.records import Status

_PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def exit_failure(code: int, who: str, before: str) -> tuple[Status, str]:
    """(crashed, message) for process `who` that ended with exit `code` before giving its result: killed by signal
    -code when `code` is negative, else exited with `code` (the message then ends with `before`)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return Status.CRASHED, f"{who} was killed by {name}"
    return Status.CRASHED, f"{who} exited with code {code} {before}"
