"""Progress of long work as typed events to a sink: what is planned, each build and evaluation, heartbeats.

The commands emit events and never format for a terminal; `plain` turns them into the lines a log gets (the CLI's
live display, kbench.cli.live, draws the same events as bars).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kbench.build.compile import BuildResult
from kbench.execution.listeners import listening
from kbench.results.records import SolutionSpec, Status
from kbench.wire.jobs import OK, JobStatus

HEARTBEAT_S = 9.0  # on long work, a line at least this often, so that a run never looks stuck


@dataclass(frozen=True)
class Note:
    """A line about the work as a whole: the run's header, the probe, what is skipped or built where."""

    text: str


@dataclass(frozen=True)
class Planned:
    """More work is known: add these to the totals (a gate's two runs plan twice)."""

    builds: int = 0
    evaluations: int = 0  # evaluation jobs: a problem's reference (eager and torch.compile) is one, each solution one


@dataclass(frozen=True)
class BuildStarted:
    problem: str
    solution: str


@dataclass(frozen=True)
class BuildFinished:
    problem: str
    solution: str
    status: JobStatus  # OK, or how it failed (compile_error, timeout, ...)
    cached: bool
    message: str
    seconds: float
    done: int
    total: int


@dataclass(frozen=True)
class EvaluationStarted:
    problem: str
    solution: str  # a solution's name, or the reference's label: "reference (eager, torch.compile)"


@dataclass(frozen=True)
class EvaluationPhase:
    problem: str
    solution: str
    phase: str  # an event the evaluation's child announced: "timed" (its timing is over; checks follow)


@dataclass(frozen=True)
class EvaluationFinished:
    problem: str
    solution: str
    statuses: tuple[Status, ...]  # one per stored row: a reference's job stores eager (and torch.compile)
    message: str = ""
    reference: bool = False


@dataclass(frozen=True)
class Heartbeat:
    label: str
    seconds: float


Event = (Note | Planned | BuildStarted | BuildFinished | EvaluationStarted | EvaluationPhase | EvaluationFinished
         | Heartbeat)
Progress = Callable[[Event], None]


def line(event: Event) -> str | None:
    """The plain line of an event, as a log (or a pipe) shows it; None for events a log does without."""
    if isinstance(event, Note):
        return event.text
    if isinstance(event, Heartbeat):
        return f"  ... {event.label}: still running ({event.seconds:.0f} s)"
    if isinstance(event, BuildFinished):
        state = "cached" if event.cached else ("ok" if event.status == OK else f"{event.status}: {event.message}")
        return f"  [build {event.done}/{event.total}] {event.problem}/{event.solution}: {state} ({event.seconds:.1f} s)"
    if isinstance(event, EvaluationStarted):
        return f"{event.problem}: {event.solution} ..."
    if isinstance(event, EvaluationFinished) and not event.reference:
        return (f"  {event.problem}/{event.solution}: {event.statuses[0].value}"
                f"{' - ' + event.message if event.message else ''}")
    return None


def plain(write: Callable[[str], None]) -> Progress:
    """A sink that writes each event's plain line (see `line`) with `write`."""

    def sink(event: Event) -> None:
        text = line(event)
        if text is not None:
            write(text)

    return sink


@contextmanager
def heartbeat(progress: Progress, label: str, on: bool = True) -> Iterator[None]:
    """While the body runs, a Heartbeat (`  ... <label>: still running (N s)`) every HEARTBEAT_S seconds."""
    if not on:
        yield
        return
    done, start = threading.Event(), time.monotonic()

    def beat() -> None:
        while not done.wait(HEARTBEAT_S):
            progress(Heartbeat(label, time.monotonic() - start))

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@contextmanager
def evaluating(progress: Progress, problem: str, solution: str, label: str) -> Iterator[None]:
    """Around one evaluation job: it started, the events its child announces (phases), heartbeats under `label`."""
    progress(EvaluationStarted(problem, solution))
    with listening(lambda name: progress(EvaluationPhase(problem, solution, name))), heartbeat(progress, label):
        yield


def build_started(progress: Progress) -> Callable[[SolutionSpec], None]:
    return lambda solution: progress(BuildStarted(solution.problem, solution.name))


def build_progress(progress: Progress) -> Callable[[BuildResult, int, int], None]:
    def on_built(result: BuildResult, done: int, total: int) -> None:
        progress(BuildFinished(result.solution.problem, result.solution.name, result.status if not result.ok else OK,
                               result.compile.cached, result.message, result.compile.seconds, done, total))

    return on_built
