"""Memory draws: the same call, on memory the caching allocator placed elsewhere, can run at another speed.

On one H200 (docs/benchmarks.md, 2026-11-28) KernelBench level 2's #77 ran the same cuDNN kernel in 4.9 or 6.4 ms
in one process depending only on which physical memory its 212 MB intermediate had been given, and #61 in 3.2 or
3.5 ms; each process, and each hand-back of the caching allocator's blocks, is one draw of that. A speedup divided by
one draw on each side then carries whichever draws the judge's eager and the solution's calls happened to get.

So for a call that allocates much (the rows `judge.AFTER_MIN_BYTES` names), both sides draw their memory anew every
GROUP_ROUNDS rounds, outside every timed interval: the judge's process hands its cached blocks back and holds a spacer
of a random number of 2 MiB pages in front of what its eager allocates next (`MemoryDraw`), the candidate's does the
same for the model bound there (protocol.Place), and each side calls once untimed so that what the call allocates is
allocated before its timed calls. Each side's samples in groups above a step of more than SLOW_GROUP between its
draw speeds (each draw's fastest sample, `draw_speed`) are then left out of its headline (`fastest_groups`), on both
sides alike: each side is timed on the best memory it drew, in PROBE_GROUPS draws, or GROUPS where a side's speed
moved between those, so neither's speed is a coin toss, and a solution gains nothing by placing its own memory well
(the reference's draws find the fast placement too). A call whose speed does not depend on its memory keeps every
group; the dropped samples stay in run.json (`diagnostics.PlacementFigures`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Protocol

from kbench.judge.timing.timers import synchronize
from kbench.results.diagnostics import PlacementFigures
from kbench.results.records import Measurement
from kbench.results.stats import median

GROUP_ROUNDS = 2  # rounds timed on one draw of each side's memory
# Draws each side's rounds take where a side's speed moved between the first PROBE_GROUPS: on #77 half to 70% of the
# draws were slow (one H200), so all 12 slow on one side is 1 in 4,096 to 1 in 70. Where neither side's moved in
# PROBE_GROUPS draws the rounds draw no more (on one H200, all of level 2's rows that draw but #77 and #61)
GROUPS = 12
PROBE_GROUPS = 4
# A step this large between a side's draw speeds (in order) separates two speeds: above the noise of a draw's fastest
# sample on one memory (below 1% on the level-2 rows), below the gaps the draws make (7% on #61, 30% on #77)
SLOW_GROUP = 0.03
# ... or this many times the spread of the samples within one draw (their median), where a call is that noisy
NOISE_STEPS = 4
# Samples each side keeps before a check's draws may stop (judge_timing.after): what the check between processes
# needs (checks.PROCESS_MIN_SAMPLES), with room
KEPT_LEAST = 8
SPACER_PAGES = 256  # a spacer of 0-255 pages of 2 MiB: the next allocations start anywhere in half a GiB
PAGE_BYTES = 2 << 20


class Candidate(Protocol):
    """The candidate's side of a draw (kbench.judge.timing.timed_call.TimedCalls.place)."""

    def place(self, pages: int) -> None: ...


def spacer_pages(rng: random.Random) -> int:
    return rng.randrange(SPACER_PAGES)


class MemoryDraw:
    """One process's draw of where its next allocations lie (CUDA; nothing on the CPU): the caching allocator's free
    blocks handed back to the driver, then a spacer of `pages` 2 MiB pages held until the next draw."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.spacer: object = None

    def draw(self, pages: int) -> None:
        if self.device != "cuda":
            return
        import torch

        self.spacer = None
        torch.cuda.empty_cache()
        if pages:
            try:
                self.spacer = torch.empty(pages * PAGE_BYTES, dtype=torch.uint8, device="cuda")
            except torch.OutOfMemoryError:  # no room for a spacer: this draw is the allocator's own
                self.spacer = None

    def both(self, candidate: Candidate, rng: random.Random, eager: Callable[[], object]) -> None:
        """Both sides' memory drawn anew, outside every timed interval: this (the judge's) process's, then one
        untimed call of its eager (`eager`); the candidate's, with one untimed call of the model bound there."""
        self.draw(spacer_pages(rng))
        eager()
        synchronize(self.device)
        candidate.place(spacer_pages(rng))

    def close(self) -> None:
        self.spacer = None


def fastest_groups(samples: Sequence[float], rounds: int = GROUP_ROUNDS,
                   tolerance: float = SLOW_GROUP) -> tuple[int, ...]:
    """The indices of `samples` (one side's, in the order taken, a draw every `rounds`) in its fastest draws: the
    complete groups' speeds (`draw_speed`) in order from the fastest, up to the first step between two of them larger
    than `step` (the next speed; `draw_groups` sets it from `tolerance` and the call's noise); a last, unfinished group
    at most that far above the slowest kept. A call whose speed does not move keeps every group however noisy it is,
    one that runs at two speeds keeps the faster's. With no complete group, all of them."""
    groups, step = draw_groups(samples, rounds, tolerance)
    complete = [[samples[i] for i in g] for g in groups if len(g) == rounds]
    if not complete:
        return tuple(range(len(samples)))
    ordered = sorted(draw_speed(g) for g in complete)
    limit = ordered[0]
    for value in ordered[1:]:
        if value > limit * (1.0 + step):
            break
        limit = value
    return tuple(i for g in groups
                 if draw_speed([samples[i] for i in g]) <= (limit if len(g) == rounds else limit * (1.0 + step))
                 for i in g)


def draw_speed(group: Sequence[float]) -> float:
    """One draw's speed: its fastest sample. A draw's memory is the same for all its calls, so a slow draw is slow in
    every one of them; a single slow sample beside a fast one on the same memory is the machine (on four H200s,
    another process making its CUDA context on the same GPU: 7-20% slow samples, thirty-first session), which the
    headline's median absorbs and which must not make a row draw on."""
    return min(group)


def draw_groups(samples: Sequence[float], rounds: int = GROUP_ROUNDS,
                tolerance: float = SLOW_GROUP) -> tuple[list[list[int]], float]:
    """`samples` (one side's, in the order taken) as the indices of each draw's group (a last one may be unfinished),
    and the step between two draw speeds that separates two speeds: `tolerance`, or NOISE_STEPS times the spread of
    the samples within one draw (their median over the complete groups) where the call is that noisy."""
    groups = [list(range(start, min(start + rounds, len(samples)))) for start in range(0, len(samples), rounds)]
    complete = [[samples[i] for i in g] for g in groups if len(g) == rounds]
    within = median([(max(g) - min(g)) / min(g) if min(g) > 0 else 0.0 for g in complete]) if complete else 0.0
    return groups, max(tolerance, NOISE_STEPS * within)


def moved(mine: Sequence[float], theirs: Sequence[float], rounds: int = GROUP_ROUNDS) -> bool:
    """Whether either side's speed moved between its draws: a draw of it left out of its fastest."""
    return (len(fastest_groups(mine, rounds)) < len(mine) or len(fastest_groups(theirs, rounds)) < len(theirs))


def stuck(solution: Sequence[float], eager: Sequence[float], rounds: int = GROUP_ROUNDS,
          tolerance: float = SLOW_GROUP) -> str:
    """Which side, if either, ran at the other side's slow speed on every draw it made: its speed never moved while
    the other's moved between two, and it sits at the other's slower one (within `tolerance`), clearly above the
    other's fast one. Each side's draws should find the fast memory as the other's did; a side that never does
    while it runs exactly as slow as the other's slow memory is stuck there, not slower (on one H200 an honest copy
    of #77 ran 46 of 46 draws at 6.43 ms while the judge's eager drew 4.94 ms seven times and 6.45 ms the rest, and
    read 0.77x; thirty-first session). "" where neither is (or a side has no complete draw)."""
    sides = {"solution": _draw_speeds(solution, rounds, tolerance), "eager": _draw_speeds(eager, rounds, tolerance)}
    for name, other in (("solution", "eager"), ("eager", "solution")):
        (flat, flat_left_out), (fast, slow) = sides[name], sides[other]
        if flat and not flat_left_out and fast and slow:
            level, fast_level, slow_level = median(flat), median(fast), median(slow)
            if abs(level / slow_level - 1.0) <= tolerance and level > fast_level * (1.0 + tolerance):
                return name
    return ""


def _draw_speeds(samples: Sequence[float], rounds: int, tolerance: float) -> tuple[list[float], list[float]]:
    """The speeds (`draw_speed`) of a side's complete draws, those `fastest_groups` keeps and those it leaves out."""
    kept = set(fastest_groups(samples, rounds, tolerance))
    groups, _ = draw_groups(samples, rounds, tolerance)
    speeds = [(draw_speed([samples[i] for i in g]), g[0] in kept) for g in groups if len(g) == rounds]
    return [v for v, k in speeds if k], [v for v, k in speeds if not k]


def drew_on(found: PlacementFigures | None) -> bool:
    """Whether a row's rounds went on drawing past PROBE_GROUPS: a side's speed moved between the first draws."""
    return found is not None and found.draws > PROBE_GROUPS


def kept_enough(mine: Sequence[float], theirs: Sequence[float], rounds: int = GROUP_ROUNDS) -> bool:
    """Whether two sides' samples, drawn together every `rounds`, end on a whole draw and each keeps KEPT_LEAST."""
    return (len(mine) % rounds == 0 and len(fastest_groups(mine, rounds)) >= KEPT_LEAST
            and len(fastest_groups(theirs, rounds)) >= KEPT_LEAST)


def kept_only(measurement: Measurement, kept: Sequence[int]) -> Measurement:
    """The measurement with only the samples at `kept` (every per-call series alike)."""
    def pick(series: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(series[i] for i in kept) if len(series) == len(measurement.samples) else series

    return dataclasses.replace(measurement, samples=pick(measurement.samples),
                               host_samples=pick(measurement.host_samples),
                               judge_samples=pick(measurement.judge_samples),
                               issue_samples=pick(measurement.issue_samples))


def figures(solution: Sequence[float], eager: Sequence[float], kept_solution: Sequence[int],
            kept_eager: Sequence[int], draws: int, rounds: int = GROUP_ROUNDS) -> PlacementFigures:
    """What the draws did to a row's two sides: the draws made, the groups of `rounds` samples, each side's groups
    kept, the spread of each side's draw speeds (`draw_speed`, slowest over fastest) and the samples left out, in the
    order taken."""
    keep_solution, keep_eager = set(kept_solution), set(kept_eager)
    return PlacementFigures(
        rounds=rounds, draws=draws, groups=-(-len(solution) // rounds),
        solution_groups_kept=len({i // rounds for i in keep_solution}),
        eager_groups_kept=len({i // rounds for i in keep_eager}),
        solution_spread=round(_spread(solution, rounds), 4), eager_spread=round(_spread(eager, rounds), 4),
        solution_dropped=tuple(s for i, s in enumerate(solution) if i not in keep_solution),
        eager_dropped=tuple(s for i, s in enumerate(eager) if i not in keep_eager),
        solution_dropped_groups=_dropped_groups(len(solution), keep_solution, rounds),
        eager_dropped_groups=_dropped_groups(len(eager), keep_eager, rounds),
        stuck=stuck(solution, eager, rounds))


def _dropped_groups(count: int, kept: set[int], rounds: int) -> tuple[int, ...]:
    """The groups of `rounds` samples (by place) with a sample left out of `kept`."""
    return tuple(sorted({i // rounds for i in range(count) if i not in kept}))


def _spread(samples: Sequence[float], rounds: int) -> float:
    speeds = [draw_speed(samples[start:start + rounds]) for start in range(0, len(samples), rounds)]
    return max(speeds) / min(speeds) if speeds and min(speeds) > 0 else 1.0
