"""Who else hears a child's progress events: a listener set, in the thread that launches a job, around it.

The launchers (warm starts, `run_child`) keep their signature: a caller that wants a job's events (the progress
display's phases) sets a listener around the launch, and the child started in that thread tells it too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import Any

Listener = Callable[[str], Any]

_listener: ContextVar[Listener | None] = ContextVar("kbench_child_listener", default=None)


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Children launched from this thread (context) while the body runs also tell `listener` their events."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def with_listener(on_event: Listener) -> Listener:
    """`on_event`, then the listener set where this is called (if any). Call it in the launching thread: events
    arrive on a reader thread, which does not see the launcher's context."""
    heard = _listener.get()
    if heard is None:
        return on_event

    def both(name: str) -> None:
        on_event(name)
        with suppress(Exception):  # a display's failure must not end the reader that carries the child's result
            heard(name)

    return both
