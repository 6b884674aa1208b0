"""Where evaluation children run: here (one per visible GPU), or as Ray tasks on a cluster."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kbench import isolation
from kbench.errors import UsageError
from kbench.isolation import ChildOutcome
from kbench.pool import Slot, gpu_slots, pinned_env, visible_devices

Launcher = Callable[[dict[str, Any], float, dict[str, str]], ChildOutcome]
EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Executor:
    """How many evaluations run at once (slots) and how one child is started (launch)."""

    name: str
    slots: tuple[Slot, ...]
    launch: Launcher
    pins: bool  # slots are GPU indices to pin children to (local); Ray pins its own tasks
    close: Callable[[], None] = lambda: None  # called once the run's evaluations are over

    def env(self, env: dict[str, str], slot: Slot) -> dict[str, str]:
        return pinned_env(env, slot) if self.pins else env


def local_executor(device: str, gpu_count: int) -> Executor:
    """Children on this machine, forked by a zygote per slot; on CUDA each slot keeps its next child started ahead
    (isolation.WarmStarts)."""
    slots = tuple(gpu_slots(device, gpu_count, visible_devices()))
    warm = isolation.WarmStarts(ahead=device == "cuda")
    return Executor("local", slots, warm, pins=True, close=warm.close)


def make_executor(name: str, device: str, gpu_count: int, address: str | None, parallel: int | None) -> Executor:
    if name not in EXECUTORS:
        raise UsageError(f"Unknown executor '{name}'. Use one of: {', '.join(EXECUTORS)}")
    if name == "local":
        if address:
            raise UsageError("--address goes with --executor ray")
        return local_executor(device, gpu_count)
    from kbench.ray_executor import ray_executor

    return ray_executor(device, address, parallel)
