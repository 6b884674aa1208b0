"""Where evaluation children run: here (one per visible GPU), or as Ray tasks on a cluster."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kbench import isolation
from kbench.errors import UsageError
from kbench.isolation import ChildOutcome
from kbench.pool import Slot, gpu_slots, pinned_env, visible_devices
from kbench.zygote import Zygote

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


def local_executor(device: str, gpu_count: int, zygote: Zygote | None = None) -> Executor:
    """Children on this machine, forked by a zygote per slot; on CUDA each slot keeps its next child started ahead
    (isolation.WarmStarts)."""
    slots = tuple(gpu_slots(device, gpu_count, visible_devices()))
    warm = isolation.WarmStarts(ahead=device == "cuda")
    if zygote is not None:  # started before the probe with the environment every child shares
        if slots == (None,):
            warm.adopt(zygote, zygote.env)
        else:
            zygote.close()  # each GPU's children are pinned: a zygote per slot
    return Executor("local", slots, warm, pins=True, close=warm.close)


def make_executor(name: str, device: str, gpu_count: int, address: str | None, parallel: int | None,
                  zygote: Zygote | None = None) -> Executor:
    """The named executor; `zygote`, the run's first (kbench.runner), goes to the local one or is closed."""
    if name not in EXECUTORS:
        raise UsageError(f"Unknown executor '{name}'. Use one of: {', '.join(EXECUTORS)}")
    if name == "local":
        if address:
            raise UsageError("--address goes with --executor ray")
        return local_executor(device, gpu_count, zygote)
    from kbench.ray_executor import ray_executor

    return ray_executor(device, address, parallel)
