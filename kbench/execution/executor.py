"""What an executor is: how many evaluations run at once (slots) and how one child is started."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kbench.execution.child import ChildOutcome
from kbench.execution.pool import Slot, pinned_env
from kbench.system.cores import CorePlan
from kbench.wire.jobs import Job

Launcher = Callable[[Job, float, dict[str, str]], ChildOutcome]


@dataclass(frozen=True)
class Executor:
    """How many evaluations run at once (slots) and how one child is started (launch)."""

    name: str
    slots: tuple[Slot, ...]
    launch: Launcher
    pins: bool  # slots are GPU indices to pin children to (local); Ray pins its own tasks
    close: Callable[[], None] = lambda: None  # called once the run's evaluations are over
    slot_env: str | None = None  # a variable naming the job's slot to `launch` (Ray: which slot actor runs it)
    cores: CorePlan | None = None  # each slot's timing core and the cores kept free of untimed work (local, CUDA)

    def env(self, env: dict[str, str], slot: Slot) -> dict[str, str]:
        if self.pins:
            return pinned_env({**env, **self.cores.env(slot)} if self.cores is not None else env, slot)
        return {**env, self.slot_env: str(slot)} if self.slot_env and slot is not None else env
