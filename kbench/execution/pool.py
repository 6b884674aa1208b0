"""Evaluations spread over the visible GPUs: one at a time per GPU, each child pinned to its GPU."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed, wait
from typing import Any, TypeVar

from kbench.execution import process_tree

Item = TypeVar("Item")
Result = TypeVar("Result")
Slot = str | None  # a CUDA device index as CUDA_VISIBLE_DEVICES takes it; None: do not pin


def gpu_slots(device: str, gpu_count: int, visible: str | None = None) -> list[Slot]:
    """One slot per visible GPU; a single slot (no pinning) on the CPU or with one GPU.

    CPU timings are never run in parallel: they would share cores and disturb each other.
    """
    if device != "cuda" or gpu_count <= 1:
        return [None]
    ids: list[Slot] = [v.strip() for v in (visible or "").split(",") if v.strip()] or [str(i) for i in range(gpu_count)]
    return ids if len(ids) > 1 else [None]


def pinned_env(env: dict[str, str], slot: Slot) -> dict[str, str]:
    return env if slot is None else {**env, "CUDA_VISIBLE_DEVICES": slot}


def drain(futures: Sequence[Future[Result]], on_done: Callable[[Future[Result]], Any]) -> None:
    """on_done(future) for each as it finishes. On Ctrl-C/SIGTERM (or any error) the queued futures are cancelled and
    running children killed before the exception goes on, so the pool's shutdown does not wait for them."""
    try:
        for future in as_completed(futures):
            on_done(future)
    except BaseException:
        for future in futures:
            future.cancel()
        process_tree.kill_all()
        raise


class Turn:
    """A job's hold on its slot (run_on_slots with `early`). The job may `release` the slot before it ends, once
    nothing of it is timed any more: the slot's next job then starts its untimed preparation while this one finishes
    its checks, and waits for `previous` (set when the job before it on the slot has ended) before it times
    anything. A job holds at most one release: after the first, `release` does nothing."""

    def __init__(self, slot: Slot, previous: threading.Event, hand_on: Callable[[Slot, threading.Event], None]) -> None:
        self.slot = slot
        self.previous = previous
        self.ended = threading.Event()
        self._hand_on = hand_on
        self._released = False
        self._ended_by_launcher = False
        self._lock = threading.Lock()

    def end_later(self) -> Callable[[], None]:
        """The launcher ends this turn itself, once its child has exited (its CUDA contexts gone), which may come
        after the job's result: the slot's next job then times on a GPU nobody else holds. Returns what ends it."""
        self._ended_by_launcher = True
        return self.ended.set

    def end_again(self) -> Callable[[], None]:
        """The job runs again before its release (its first try failed before its turn): what ended the first try
        ends nothing now; the second try's end, returned, is the one the slot's next job waits for."""
        assert not self._released, "a released turn's end is the next job's already"
        self.ended = threading.Event()
        return self.end_later()

    def release(self) -> None:
        """Let the slot's next job start; it waits for this one's `ended` before its timed part."""
        with self._lock:
            if self._released:
                return
            self._released = True
        self._hand_on(self.slot, self.ended)


_turns = threading.local()


def current_turn() -> Turn | None:
    """The turn of the job this thread runs for run_on_slots (with `early`), if any: a launcher releases it."""
    return getattr(_turns, "turn", None)


def in_turn(turn: Turn | None, work: Callable[[], Result]) -> Result:
    """Run `work` in this thread as the job of `turn` (its launcher finds it through `current_turn`); when it returns
    the turn is released if it was not yet, and ended unless its launcher ends it later (`Turn.end_later`)."""
    _turns.turn = turn
    try:
        return work()
    finally:
        _turns.turn = None
        if turn is not None:
            if not turn._ended_by_launcher:
                turn.ended.set()
            turn.release()


def run_on_slots(items: Sequence[Item], slots: Sequence[Slot], work: Callable[[Item, Slot], Result],
                 on_done: Callable[[Item, Result], Any], early: bool = False) -> None:
    """Run work(item, slot) for every item; on_done runs in the caller's thread.

    Never two at once on one slot, unless `early`: then a job may release its slot before it ends (its `Turn`,
    which the launcher finds through `current_turn`), and the slot's next job starts meanwhile; at most two jobs share a
    slot, the second held until the first ends before it times anything (the launcher waits for `Turn.previous`).

    With one slot and not `early` the items run in order in the caller's own thread, so Ctrl-C reaches the running
    child directly. Otherwise on_done sees results in the order they finish.
    """
    if len(slots) <= 1 and not early:
        for item in items:
            on_done(item, work(item, slots[0] if slots else None))
        return
    free: queue.Queue[tuple[Slot, threading.Event]] = queue.Queue()
    for slot in slots or [None]:
        done = threading.Event()
        done.set()
        free.put((slot, done))

    stopping = threading.Event()  # the run was stopped: a task still waiting for a slot gives up

    def hand_on(slot: Slot, ended: threading.Event) -> None:
        free.put((slot, ended))

    def take() -> tuple[Slot, threading.Event]:
        while True:
            try:
                return free.get(timeout=0.1)
            except queue.Empty:
                if stopping.is_set():
                    raise RunStopped from None

    def task(item: Item) -> Result:
        slot, previous = take()
        if stopping.is_set():
            hand_on(slot, previous)
            raise RunStopped
        if not early:
            try:
                return work(item, slot)
            finally:
                hand_on(slot, previous)  # the slot back, its job over
        return in_turn(Turn(slot, previous, hand_on), lambda: work(item, slot))

    width = max(len(slots), 1) * (2 if early else 1)  # with `early`, a slot's next job starts before its last ends
    with ThreadPoolExecutor(max_workers=width) as pool:
        futures = {pool.submit(task, item): item for item in items}
        try:
            drain(list(futures), lambda future: on_done(futures[future], future.result()))
        except BaseException:
            stopping.set()  # a task still waiting for its slot gives up
            # One that took its slot as drain killed the children may start a child after that: kill again until
            # every task has returned, so the pool's shutdown never waits for a whole evaluation.
            while wait(list(futures), timeout=0.2).not_done:
                process_tree.kill_all()
            raise


class RunStopped(Exception):
    """A task that was still waiting for its slot when the run stopped (run_on_slots)."""


def visible_devices() -> str | None:
    return os.environ.get("CUDA_VISIBLE_DEVICES")
