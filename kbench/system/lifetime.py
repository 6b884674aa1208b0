"""A child process's lifetime: tied to its parent's, and how it ended."""

from __future__ import annotations

import ctypes
import multiprocessing
import shutil
import signal

from kbench.results.records import Status

_PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def remove_temp_dir() -> None:
    """Remove this process's multiprocessing temp folder, if it made one: its resource sharer's socket lives there
    when tensors went to another process by descriptor (a CPU judge's inputs to its candidate). Interpreter exit
    removes it, but kbench's children end with os._exit, and every CPU evaluation left a /tmp/pymp-* folder."""
    config = getattr(multiprocessing.current_process(), "_config", {})  # multiprocessing.util.get_temp_dir keeps it
    folder = config.get("tempdir")
    if isinstance(folder, str):
        shutil.rmtree(folder, ignore_errors=True)


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
