"""Progress on a terminal: bars with counts and ETA for builds and evaluations, what runs now, a tally of statuses.

The commands emit typed events (kbench.commands.progress); on a terminal they drive a rich `Live` display on
stderr, elsewhere (CI, pipes, tests) they become the plain lines a log gets. stdout never carries either.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as Bars
from rich.text import Text

from kbench.cli.app import progress as write_line
from kbench.commands.progress import (
    BuildFinished,
    BuildStarted,
    EvaluationFinished,
    EvaluationPhase,
    EvaluationStarted,
    Event,
    Note,
    Planned,
    Progress,
    line,
    plain,
)
from kbench.results.records import Status
from kbench.wire.jobs import OK

REFRESH_PER_SECOND = 4
STARTED = "evaluating"  # the phase of an evaluation until its child announces another
PHASES = {"timed": "timed, finishing"}  # a child's event, as the display names the phase it begins
STYLES = {Status.CORRECT: "green", Status.SUSPECT: "yellow", Status.NOT_RUN: "dim"}  # any other status: red


def wants_live(choice: bool | None, stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """`--progress`/`--no-progress` when given; else live only on a terminal that can redraw (not TERM=dumb)."""
    if choice is not None:
        return choice
    stream = sys.stderr if stream is None else stream
    environ = os.environ if environ is None else environ
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and environ.get("TERM") != "dumb"


class EtaColumn(ProgressColumn):
    """Time left at the mean pace so far. rich's own estimate looks at the last 30 s only and leaves out the first
    finished item: with evaluations of a minute each it would have none."""

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text("")
        if task.total is None or not task.completed or task.elapsed is None:
            return Text("ETA -:--:--", style="progress.remaining")
        left = task.elapsed / task.completed * (task.total - task.completed)
        return Text(f"ETA {timedelta(seconds=round(left))}", style="progress.remaining")


class LiveProgress:
    """A sink of progress events that draws them with rich on `console`; `with` it to show and stop the display."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic,
                 auto_refresh: bool = True) -> None:
        self.console = console
        self.bars = Bars(TextColumn("{task.description:<12}", markup=False), BarColumn(), MofNCompleteColumn(),
                         TimeElapsedColumn(), EtaColumn(), console=console, get_time=clock, auto_refresh=False)
        self.running = Bars(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                            console=console, get_time=clock, auto_refresh=False)
        self.tally = Tally()
        self._tasks: dict[str, TaskID] = {}  # "builds", "evaluations"
        self._totals: Counter[str] = Counter()
        self._now: dict[tuple[str, str, str], TaskID] = {}  # what runs now: ("build"/"evaluation", problem, solution)
        self._failed_builds = 0
        self._evaluating = False
        self._lock = threading.Lock()
        self.live = Live(console=console, auto_refresh=auto_refresh, refresh_per_second=REFRESH_PER_SECOND,
                         redirect_stdout=False, redirect_stderr=True, get_renderable=self.render)

    def render(self) -> RenderableType:
        return Group(*(part for part in (self.bars, self.running) if part.tasks), self.tally)

    def __enter__(self) -> LiveProgress:
        self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the display (also on Ctrl-C): what was running is no longer, the cursor comes back."""
        with self._lock:
            for task in self._now.values():
                self.running.remove_task(task)
            self._now.clear()
        self.live.stop()

    def __call__(self, event: Event) -> None:
        with self._lock:
            printed = self._apply(event)
        if printed is not None:  # outside the lock: printing takes the display's lock, whose refresh takes ours
            self.console.print(printed, markup=False, highlight=False)

    def _apply(self, event: Event) -> Text | None:
        """Update the display's state; what to print above it, if anything."""
        if isinstance(event, Planned):
            self._plan("builds", event.builds)
            self._plan("evaluations", event.evaluations)
        elif isinstance(event, BuildStarted):
            self._now[("build", event.problem, event.solution)] = self.running.add_task(_doing(event, "building"))
        elif isinstance(event, BuildFinished):
            self._stopped(("build", event.problem, event.solution))
            self._failed_builds += event.status != OK
            failed = f" ({self._failed_builds} failed)" if self._failed_builds else ""
            self.bars.update(self._task("builds"), advance=1, description=f"builds{failed}")
            return Text(line(event) or "", style="" if event.status == OK else "red")
        elif isinstance(event, EvaluationStarted):
            self._start_evaluations()
            self._now[("evaluation", event.problem, event.solution)] = self.running.add_task(_doing(event, STARTED))
        elif isinstance(event, EvaluationPhase) and (
                task := self._now.get(("evaluation", event.problem, event.solution))) is not None:
            self.running.update(task, description=_doing(event, PHASES.get(event.phase, event.phase)))
        elif isinstance(event, EvaluationFinished):
            return self._finish(event)
        elif isinstance(event, Note):
            return Text(event.text)
        return None  # heartbeats: the display's clocks show that work goes on

    def _finish(self, event: EvaluationFinished) -> Text | None:
        self._start_evaluations()
        self.bars.advance(self._task("evaluations"))
        self._stopped(("evaluation", event.problem, event.solution))
        self.tally.counts.update(event.statuses)
        if event.reference:
            return None
        status = event.statuses[0]
        return Text.assemble(f"  {event.problem}/{event.solution}: ", (status.value, STYLES.get(status, "red")),
                             f" - {event.message}" if event.message else "")

    def _stopped(self, key: tuple[str, str, str]) -> None:
        if (task := self._now.pop(key, None)) is not None:
            self.running.remove_task(task)

    def _task(self, name: str) -> TaskID:
        if name not in self._tasks:
            self._tasks[name] = self.bars.add_task(name, total=0, start=name != "evaluations")
        return self._tasks[name]

    def _plan(self, name: str, more: int) -> None:
        if more:
            self._totals[name] += more
            self.bars.update(self._task(name), total=self._totals[name])

    def _start_evaluations(self) -> None:
        """The evaluations' clock (and so their ETA) starts with the first evaluation, not with the builds."""
        if not self._evaluating:
            self.bars.start_task(self._task("evaluations"))
            self._evaluating = True


def _doing(event: BuildStarted | EvaluationStarted | EvaluationPhase, phase: str) -> str:
    return f"{event.problem}/{event.solution}: {phase}"


class Tally:
    """The finished rows' statuses, drawn as `rows: correct 3 · incorrect 1 · ...` (in the order of Status, each in
    its status's colour) from the counts at the time it is drawn."""

    def __init__(self) -> None:
        self.counts: Counter[Status] = Counter()

    def __rich__(self) -> Text:
        parts: list[Any] = ["rows: "]
        for status in (s for s in Status if self.counts[s]):  # Status, not the counts: they may grow meanwhile
            parts += [" · "] if len(parts) > 1 else []
            parts.append((f"{status.value} {self.counts[status]}", STYLES.get(status, "red")))
        return Text.assemble(*parts) if len(parts) > 1 else Text("")


def terminal_console(force: bool = False) -> Console:
    """The display's console on stderr; rich leaves colour out under NO_COLOR. `force` draws on a non-terminal too."""
    return Console(stderr=True, force_terminal=True if force else None)


@contextmanager
def progress_sink(choice: bool | None = None) -> Iterator[Progress]:
    """The sink a command's progress goes to: the live display on a terminal (or with --progress), plain lines on
    stderr otherwise. The display is stopped when the body ends, however it ends, before any error is printed."""
    if not wants_live(choice):
        yield plain(write_line)
        return
    with LiveProgress(terminal_console(force=bool(choice))) as sink:
        yield sink
