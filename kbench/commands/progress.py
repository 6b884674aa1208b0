"""Progress lines of long work: the callback, a heartbeat while work runs, and a line per finished build."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kbench.build.compile import BuildResult

Progress = Callable[[str], None]

HEARTBEAT_S = 9.0  # on long work, a line at least this often, so that a run never looks stuck


@contextmanager
def heartbeat(progress: Progress, label: str, on: bool = True) -> Iterator[None]:
    """While the body runs, `  ... <label>: still running (N s)` every HEARTBEAT_S seconds."""
    if not on:
        yield
        return
    done, start = threading.Event(), time.monotonic()

    def beat() -> None:
        while not done.wait(HEARTBEAT_S):
            progress(f"  ... {label}: still running ({time.monotonic() - start:.0f} s)")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def build_progress(progress: Progress) -> Callable[[BuildResult, int, int], None]:
    def on_built(result: BuildResult, done: int, total: int) -> None:
        state = "cached" if result.compile.cached else ("ok" if result.ok else f"{result.status}: {result.message}")
        progress(f"  [build {done}/{total}] {result.solution.problem}/{result.solution.name}: {state} ({result.compile.seconds:.1f} s)")

    return on_built
