"""Which host cores time and which do the rest of a CUDA run.

Each GPU slot's timed calls are issued from one core of its own (`timing_core`): the judge, its candidate and the
reference's own process are pinned there (`pin`) for their timed part, one after another, never at once. On the H100
machine an honest copy of a launch-bound model read anywhere from 0.86x to 1.32x when judge and candidate ran on cores
of their own choosing; on one core a difference between cores cannot pass for a speedup.

A pin says where the timed processes run, not that nothing else does. Everything else of the run (the parent, the
workers preparing the next job, the spares making their CUDA contexts, the candidates before their turn, the checks
after another slot's timing) could be scheduled on a timing core, or on its SMT sibling, which shares the core's
pipelines. So a run keeps its timing cores, and their siblings, free of that work (`CorePlan`): every worker places
itself on the other cores when it starts (`enter_untimed`), the parent does for the run (`untimed_here`), and a
process moves to its slot's timing core only for its turn. Two slots never get siblings of one core. On two H200s of
one host each slot's timed part took 12-20% longer while the other slot was busy (docs/benchmarks.md, 2026-11-28),
which is what such sharing looks like; the figure with the cores kept free is measured by `bench/scale.py`, and
KBENCH_SHARE_TIMING_CORES=1 turns the keeping off to compare.

Where fewer than MIN_UNTIMED cores would be left for the rest (a small machine), nothing is kept free: the timed
processes are still pinned.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

TIMING_CORE_ENV = "KBENCH_TIMING_CORE"  # the core this slot's timed calls are issued from
UNTIMED_CORES_ENV = "KBENCH_UNTIMED_CORES"  # where a slot's processes run outside their turn (a CPU list: 0-13,16)
SHARE_ENV = "KBENCH_SHARE_TIMING_CORES"  # "1": keep no core free (to measure what keeping them buys)
PLAN_ENV = (TIMING_CORE_ENV, UNTIMED_CORES_ENV)  # what a slot's workers are started with
MIN_UNTIMED = 4  # cores left for everything else, at least, before any is kept free
CPU_ROOT = Path("/sys/devices/system/cpu")

Slot = str | None  # kbench.execution.pool.Slot: a CUDA device index, or None (one GPU, not pinned)
Siblings = Callable[[int], frozenset[int]]


@dataclass(frozen=True)
class CorePlan:
    """A CUDA run's cores: each slot's timing core, and the cores everything else runs on (all the allowed ones but
    the timing cores and their SMT siblings, or all of them where none is kept free)."""

    timing: tuple[tuple[Slot, int], ...]
    untimed: frozenset[int]
    kept: frozenset[int]  # the timing cores and their siblings, free of untimed work; empty: none kept

    def core(self, slot: Slot) -> int:
        return dict(self.timing)[slot]

    def describe(self) -> str:
        """One line for the run's start: each slot's timing core, and where everything else runs."""
        each = ", ".join(f"{'the GPU' if slot is None else f'GPU {slot}'}: core {core}" for slot, core in self.timing)
        if not self.kept:
            return f"timed calls issued from {each}; no core kept free of the run's other work"
        kept = f"core{'s' if len(self.kept) > 1 else ''} {format_cpulist(self.kept)}"
        return f"timed calls issued from {each}; {kept} kept free of the run's other work, which runs on " + \
            format_cpulist(self.untimed)

    def env(self, slot: Slot) -> dict[str, str]:
        """The variables a slot's workers are started with (kbench.execution.executor.Executor.env)."""
        found = {TIMING_CORE_ENV: str(self.core(slot))}
        if self.kept:
            found[UNTIMED_CORES_ENV] = format_cpulist(self.untimed)
        return found


def parse_cpulist(text: str) -> frozenset[int]:
    """The cores of a kernel CPU list ("0-3,8,10-11"); ValueError if it is not one."""
    cores: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return frozenset(cores)


def format_cpulist(cores: Iterable[int]) -> str:
    ordered, parts = sorted(cores), []
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            low, high = ordered[start], ordered[i - 1]
            parts.append(str(low) if low == high else f"{low}-{high}")
            start = i
    return ",".join(parts)


def siblings(core: int, root: Path = CPU_ROOT) -> frozenset[int]:
    """The logical cores that share `core`'s physical core, itself included (sysfs); {core} where it says nothing."""
    try:
        return parse_cpulist((root / f"cpu{core}" / "topology" / "thread_siblings_list").read_text()) | {core}
    except (OSError, ValueError):
        return frozenset({core})


def timing_order(allowed: Iterable[int], siblings_of: Siblings = siblings) -> list[int]:
    """The cores the GPU slots' timed calls take, the first GPU's first: from the last allowed core down, skipping the
    siblings of those taken, so that no two slots share a physical core (with more GPUs than physical cores, the
    slots past the last share from the start again: `pick`)."""
    order: list[int] = []
    taken: set[int] = set()
    for core in sorted(allowed, reverse=True):
        if core not in taken:
            order.append(core)
            taken |= siblings_of(core)
    return order


def slot_index(visible: str) -> int:
    """The GPU index a slot's CUDA_VISIBLE_DEVICES names first (0 for none, or for a UUID)."""
    first = visible.split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def allowed_cores() -> frozenset[int] | None:
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def timing_core(cores: Sequence[int] | None = None, visible: str | None = None,
                siblings_of: Siblings = siblings) -> int | None:
    """The core a GPU slot's timed calls are issued from: the one the run's plan gave the slot (KBENCH_TIMING_CORE,
    when `cores` is not given), else the slot's place in `timing_order` of `cores` (this process's allowed cores), by
    the first index of `visible` (CUDA_VISIBLE_DEVICES). None where affinity cannot be read."""
    planned = os.environ.get(TIMING_CORE_ENV, "")
    if cores is None and planned.isdigit():
        return int(planned)
    if cores is None:
        found = allowed_cores()
        if found is None:
            return None
        cores = sorted(found)
    return pick(timing_order(cores, siblings_of),
                visible if visible is not None else os.environ.get("CUDA_VISIBLE_DEVICES", ""))


def pick(order: Sequence[int], visible: str) -> int | None:
    """The core of `timing_order` for the slot whose CUDA_VISIBLE_DEVICES is `visible` (by its first GPU index)."""
    return order[slot_index(visible) % len(order)] if order else None


def plan_cores(slots: Sequence[Slot], allowed: Collection[int], visible: str = "", siblings_of: Siblings = siblings,
               share: bool = False) -> CorePlan:
    """Each slot's timing core (a slot None is the GPU `visible` names first) and the cores left for the rest: all the
    allowed ones but the timing cores and their siblings, unless that leaves fewer than MIN_UNTIMED, or `share`."""
    order = timing_order(allowed, siblings_of)
    timing = tuple((slot, core) for slot in slots
                   if (core := pick(order, slot if slot is not None else visible)) is not None)
    kept = frozenset(c for _, core in timing for c in siblings_of(core) | {core} if c in allowed)
    if share or len(set(allowed) - kept) < MIN_UNTIMED:
        kept = frozenset()
    return CorePlan(timing=timing, untimed=frozenset(allowed) - kept, kept=kept)


def run_plan(slots: Sequence[Slot], environ: Mapping[str, str] = os.environ) -> CorePlan | None:
    """This machine's plan for a CUDA run on `slots` (None where affinity cannot be read)."""
    allowed = allowed_cores()
    if not allowed:
        return None
    return plan_cores(slots, allowed, environ.get("CUDA_VISIBLE_DEVICES", ""),
                      share=environ.get(SHARE_ENV, "") == "1")


def place(pid: int, cores: Collection[int]) -> bool:
    """Run every thread of process `pid` (0: this process) on `cores` only; False where that is not possible.

    Every thread, not only the main one: a process pinned after CUDA started (a candidate or worker warmed up ahead of
    its job) has the driver's threads, and may have autograd's device thread, which a pin of the main thread alone
    would leave on every core, so the judge's and the candidate's threads would sit differently depending on which
    was warmed up first. Threads started later inherit the placement of the thread that starts them."""
    if not cores:
        return False
    try:
        tasks = [int(t) for t in os.listdir(f"/proc/{pid or os.getpid()}/task")]
    except (OSError, ValueError):
        tasks = [pid]
    placed = False
    for task in tasks:
        try:
            os.sched_setaffinity(task, set(cores))
        except (AttributeError, OSError):  # a thread that ended meanwhile, or no affinity on this system
            continue
        placed = True
    return placed


def pin(pid: int, core: int | None) -> bool:
    """Run every thread of process `pid` (0: this process) on `core` only (`place`); False for None."""
    return core is not None and place(pid, {core})


def enter_untimed(environ: Mapping[str, str] = os.environ) -> bool:
    """Place this process on the cores its run leaves for untimed work (KBENCH_UNTIMED_CORES), if it names any: a
    worker does at its start, so that it, its candidates and everything they start stay off the timing cores until
    their turn pins them there."""
    text = environ.get(UNTIMED_CORES_ENV, "")
    try:
        cores = parse_cpulist(text)
    except ValueError:
        return False
    return place(0, cores)


@contextmanager
def untimed_here(plan: CorePlan | None) -> Iterator[None]:
    """This process (a run's parent) on the plan's untimed cores while the block runs, then back where it was."""
    before = allowed_cores()
    if plan is None or not plan.kept or before is None:
        yield
        return
    place(0, plan.untimed)
    try:
        yield
    finally:
        place(0, before)
