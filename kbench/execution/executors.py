"""Where evaluation children run: here (one per visible GPU), or as Ray tasks on a cluster."""

from __future__ import annotations

from kbench.errors import UsageError
from kbench.execution import warm_starts
from kbench.execution.executor import Executor
from kbench.execution.pool import gpu_slots, visible_devices
from kbench.execution.ray_executor import ray_executor
from kbench.execution.zygote import Zygote
from kbench.system import cores

EXECUTORS = ("local", "ray")


def local_executor(device: str, gpu_count: int, zygote: Zygote | None = None) -> Executor:
    """Children on this machine, forked by one zygote and placed on their slot's GPU; on CUDA each slot keeps its
    next child started ahead (warm_starts.WarmStarts), and has a core of its own for its timed calls, kept free of
    the run's other work (kbench.system.cores)."""
    slots = tuple(gpu_slots(device, gpu_count, visible_devices()))
    warm = warm_starts.WarmStarts(ahead=device == "cuda")
    if zygote is not None:  # started before the probe with the environment every child shares: warm by now
        warm.adopt(zygote, zygote.env)
    return Executor("local", slots, warm, pins=True, close=warm.close,
                    cores=cores.run_plan(slots) if device == "cuda" else None)


def make_executor(name: str, device: str, gpu_count: int, address: str | None, parallel: int | None,
                  zygote: Zygote | None = None) -> Executor:
    """The named executor; `zygote`, the run's first (kbench.commands.execute), goes to the local one or is closed."""
    if name not in EXECUTORS:
        raise UsageError(f"Unknown executor '{name}'. Use one of: {', '.join(EXECUTORS)}")
    if name == "local":
        if address:
            raise UsageError("--address goes with --executor ray")
        return local_executor(device, gpu_count, zygote)
    return ray_executor(device, address, parallel)
