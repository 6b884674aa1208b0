"""Evaluations spread over the visible GPUs: one at a time per GPU, each child pinned to its GPU."""

from __future__ import annotations

import os
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
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


def run_on_slots(items: Sequence[Item], slots: Sequence[Slot], work: Callable[[Item, Slot], Result],
                 on_done: Callable[[Item, Result], Any]) -> None:
    """Run work(item, slot) for every item, never two at once on one slot; on_done runs in the caller's thread.

    With one slot the items run in order in the caller's own thread, so Ctrl-C reaches the running
    child directly. With several, on_done sees results in the order they finish.
    """
    if len(slots) <= 1:
        for item in items:
            on_done(item, work(item, slots[0] if slots else None))
        return
    free: queue.Queue[Slot] = queue.Queue()
    for slot in slots:
        free.put(slot)

    def task(item: Item) -> Result:
        slot = free.get()
        try:
            return work(item, slot)
        finally:
            free.put(slot)

    with ThreadPoolExecutor(max_workers=len(slots)) as pool:
        futures = {pool.submit(task, item): item for item in items}
        drain(list(futures), lambda future: on_done(futures[future], future.result()))


def visible_devices() -> str | None:
    return os.environ.get("CUDA_VISIBLE_DEVICES")
