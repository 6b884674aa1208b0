"""A run's slot timeline: when each job's worker got its job, its turn, timed, answered, exited and was swept.

Written only when the environment names a file (`KBENCH_TIMELINE=PATH`, one JSON object a line, appended):
`bench/scale.py` sets it and reads where a GPU's wall time goes between evaluations (docs/benchmarks.md). Times
are the parent's monotonic clock in seconds; `job` is unique in the file (the parent's
PID and a count: a resumed run appends), `what` names the job and `mode` says its kind (kbench.wire.jobs: evaluate,
reference, build, ...).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Protocol

ENV = "KBENCH_TIMELINE"
# The events of one job, in the order they come on its slot. Two tell of its worker, whenever they came: "started"
# (the launcher started it: ahead of the job, or when the job came) and "ready" (it had made what it makes before
# a job, its CUDA context on a GPU, and waited for its job); a worker ready after its turn kept its GPU idle.
EVENTS = ("started", "ready", "handed", "turn", "timed", "answered", "exited", "swept")


class Mark(Protocol):
    """What marks one job's events: `at`, a time.monotonic() reading of any process of the machine (None: now)."""

    def __call__(self, event: str, at: float | None = None) -> None: ...


def no_mark(event: str, at: float | None = None) -> None:
    return None


@dataclass(frozen=True)
class TimelineEvent:
    """One line of the file."""

    t: float
    slot: str
    job: str
    what: str
    mode: str
    event: str


class Timeline:
    """The file's writer; one per launcher. Without a path every mark does nothing."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path if path is not None else os.environ.get(ENV) or None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        if self.path is not None:
            try:
                open(self.path, "a").close()
            except OSError as exc:  # a timeline the run cannot write is said once, and the run goes on without it
                print(f"[warning] {ENV}={self.path}: cannot write there ({exc.strerror}); no timeline is kept",
                      file=sys.stderr)
                self.path = None

    def marker(self, slot: str | None, what: str, mode: str) -> Mark:
        """What marks the events of one job (`what`, of kind `mode`) on `slot`."""
        if self.path is None:
            return no_mark
        job = f"{os.getpid()}-{next(self._ids)}"

        def mark(event: str, at: float | None = None) -> None:
            when = time.monotonic() if at is None else at  # CLOCK_MONOTONIC: one clock for every process here
            line = json.dumps(dataclasses.asdict(TimelineEvent(round(when, 6), slot or "-", job, what, mode, event)))
            try:
                with self._lock, open(str(self.path), "a") as out:
                    out.write(line + "\n")
            except OSError:
                pass  # the disk filled mid-run, say: the run's results matter more than its timeline

        return mark


def read(path: str) -> list[TimelineEvent]:
    """The events a run wrote, in file order; lines that are not one (a run cut mid-line) are skipped."""
    events = []
    with open(path) as lines:
        for line in lines:
            try:
                data = json.loads(line)
                named = {f.name: str(data[f.name]) for f in dataclasses.fields(TimelineEvent) if f.name != "t"}
                events.append(TimelineEvent(float(data["t"]), **named))
            except (ValueError, KeyError, TypeError):
                continue
    return events
