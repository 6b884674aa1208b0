"""Sampling: warm-up, rounds of samples from several callables, adaptive stopping (the timers: the timers module)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from kbench.config.run_config import TimingPolicy
from kbench.judge.timing.checks import STOP_CONVERGED, STOP_MAX_TIME, STOP_STUCK
from kbench.judge.timing.timers import Clock, Timer, synchronize
from kbench.results.records import Measurement, Regime
from kbench.results.stats import median_ci_relative

_perf_counter = time.perf_counter  # bound at import, as every clock of the harness is
SETTLE_S = 1e-3  # the GPU's pause between a round's input refresh and its first timed call


def settle(device: str, clock: Clock = _perf_counter) -> None:
    """After the inputs of a round are written, wait until the device is idle and then a little longer, so that the
    round's first timed call does not start straight after gigabytes of the harness's own memory traffic (on the
    H100 a call that did ran 1-4% slower than the same call after the other process's round trip). The host spins
    through the pause rather than sleeping: a core left idle may be slower to issue the next call's launches."""
    synchronize(device)
    if device == "cuda":
        end = clock() + SETTLE_S
        while clock() < end:
            pass


def needs_priming(device: str, fn: Callable[[], object], timer: Timer) -> bool:
    """Decide fn's regime on `timer` (`CudaEventTimer.decide`) and whether its timed calls go behind an untimed one
    (`local_sampler`): on a GPU, when they are timed in the host regime, whose time is the host's."""
    return timer.decide(fn) == Regime.HOST and device == "cuda"


class Sampled(NamedTuple):
    """One sample: the timed seconds, the host seconds over the same window in the process that timed it, and, for a
    call timed in another process, the judge's own clock over the whole round trip (None otherwise)."""

    timed: float
    wall: float
    judge: float | None = None
    issue: float | None = None  # host seconds to issue the call (see CudaEventTimer)
    regime: str = ""  # the timer's regime for this sample (Regime.GPU or Regime.HOST)


Sampler = Callable[[], Sampled]


def local_sampler(fn: Callable[[], object], timer: Timer, primed: bool = False) -> Sampler:
    """A sampler that times fn in this process; `primed`: each timed call right after an untimed one (for a
    launch-bound call, whose time is the host's: see docs/timing.md)."""
    def sample() -> Sampled:
        if primed:
            fn()
        timed, wall = timer.sample(fn)
        return Sampled(timed, wall, None, timer.last_issue, timer.regime)

    return sample


def _warm(sample: Sampler, policy: TimingPolicy, clock: Clock) -> int:
    calls, start = 0, clock()
    while calls < policy.warmup_calls or clock() - start < policy.warmup_s:
        sample()
        calls += 1
    return calls


def warm_up(fn: Callable[[], object], timer: Timer, policy: TimingPolicy, clock: Clock = _perf_counter) -> int:
    """Take and discard samples of fn for at least `warmup_calls` calls and `warmup_s`; returns the count.

    Warm-up calls go through the timer, so each one is synchronized: calling fn bare in a loop would
    only queue GPU work for `warmup_s` of host time (hundreds of calls of a 10 ms kernel), and the
    first timed sample would then wait for that backlog.
    """
    return _warm(local_sampler(fn, timer), policy, clock)


def converged(samples: list[float], elapsed: float, policy: TimingPolicy) -> bool:
    return (
        len(samples) >= policy.min_samples
        and elapsed >= policy.min_time_s
        and median_ci_relative(samples) <= policy.rel_ci
    )


def measure_interleaved(
    fns: Mapping[str, Callable[[], object]],
    timer: Timer,
    policy: TimingPolicy,
    clock: Clock = _perf_counter,
) -> dict[str, Measurement]:
    """Time several callables of this process in alternating rounds (see `measure_rounds`)."""
    return measure_rounds({name: local_sampler(fn, timer) for name, fn in fns.items()}, policy, clock)


def _no_hook(round_index: int) -> None:
    return None


def measure_rounds(
    samplers: Mapping[str, Sampler],
    policy: TimingPolicy,
    clock: Clock = _perf_counter,
    before_round: Callable[[int], object] = _no_hook,
    after_round: Callable[[int], object] = _no_hook,
    alternate: bool = True,
    kept: Callable[[Sequence[float]], Sequence[int]] | None = None,
    more: Callable[[int], bool] = lambda rounds: False,
    stuck: Callable[[int], bool] = lambda rounds: False,
) -> dict[str, Measurement]:
    """Sample several callables in alternating rounds, so that drift (clocks, heat) hits all alike.

    Args:
        samplers: name -> a sampler: times one call, returns its Sampled (seconds: the timer's, the host's).
        policy: the warm-up (calls, seconds), at least `min_samples` and `min_time_s`, the target `rel_ci` (the
            median's 95% interval as a fraction of it) and the cap `max_time_s` (seconds).
        clock: the clock of the loop's own time budget, seconds (injected in tests).
        before_round, after_round: hooks called with the round's index (-1: before the warm-up).
        alternate: reverse the order on odd rounds.
        kept: which of a sampler's samples count towards stopping, from their times in the order taken (each side's
            fastest memory draws, kbench.judge.timing.placement.fastest_groups; the caller keeps the same ones in
            its headline); None: all of them.
        more: whether, after this many rounds, rounds must go on whatever the samples say (draws of memory a row
            still needs, kbench.judge.timing.rounds.SolutionRounds.more).
        stuck: whether, after this many rounds, more rounds are futile (a side stuck at the other's slow memory,
            kbench.judge.timing.rounds.SolutionRounds.stuck): sampling stops with STOP_STUCK.

    Returns:
        name -> Measurement: each sampler's samples in seconds, in the order taken (all of them, `kept` or not), and
        why sampling stopped.

    Each round takes one sample of every sampler, in forward order on even rounds and reverse order on odd ones
    (`alternate=False`: forward order in every round, so each sampler always follows the same one). `before_round(i)`
    runs before round i (fresh inputs: round -1 before the warm-up) and `after_round(i)` after it (output checks); both
    lie outside every timed interval. Sampling stops when every sampler has converged (see `converged`) or when the
    loop has run for `max_time_s`, whichever comes first (with `kept`: every sampler has `min_samples` samples and its
    kept ones, at least half that many, have converged), except that rounds go on past the cap up to `min_samples`
    while that fits in MIN_SAMPLES_OVERRUN times the cap at the pace so far (`_room_for_min_samples`); at least one
    round always runs.
    """
    names = list(samplers)
    before_round(-1)
    for name in names:
        _warm(samplers[name], policy, clock)
    taken: dict[str, list[Sampled]] = {n: [] for n in names}
    start, rounds = clock(), 0
    while True:
        before_round(rounds)
        for name in names if rounds % 2 == 0 or not alternate else reversed(names):
            taken[name].append(samplers[name]())
        after_round(rounds)
        rounds += 1
        elapsed = clock() - start
        if stuck(rounds):  # converged or not, these rounds are not the row's
            reason = STOP_STUCK
            break
        if all(_converged(taken[n], elapsed, policy, kept) for n in names) and not more(rounds):
            reason = STOP_CONVERGED
            break
        if elapsed >= policy.max_time_s and not _room_for_min_samples(rounds, elapsed, policy):
            reason = STOP_MAX_TIME
            break
    return {n: _measurement(taken[n], reason) for n in names}


def _kept(taken: list[Sampled], kept: Callable[[Sequence[float]], Sequence[int]] | None) -> list[Sampled]:
    return taken if kept is None else [taken[i] for i in kept([s.timed for s in taken])]


def _converged(taken: list[Sampled], elapsed: float, policy: TimingPolicy,
               kept: Callable[[Sequence[float]], Sequence[int]] | None) -> bool:
    if kept is None:
        return converged([s.timed for s in taken], elapsed, policy)
    chosen = [s.timed for s in _kept(taken, kept)]
    return (len(taken) >= policy.min_samples and len(chosen) >= policy.min_samples // 2
            and converged(chosen, elapsed, dataclasses.replace(policy, min_samples=0)))


# At the cap, rounds go on up to `min_samples` when that fits in this many times `max_time_s` at the rounds' pace so far
MIN_SAMPLES_OVERRUN = 2.0


def _room_for_min_samples(rounds: int, elapsed: float, policy: TimingPolicy) -> bool:
    """Whether the loop, at its cap with fewer than `min_samples` rounds, goes on: when `min_samples` rounds at the
    pace so far take at most MIN_SAMPLES_OVERRUN times the cap. A call of up to a few hundred milliseconds (with its
    round's protocol) then gets its `min_samples` samples whatever its overheads did to the first ones; a slower one
    stops at the cap, with `[few_samples]`."""
    pace = elapsed / rounds
    return rounds < policy.min_samples and policy.min_samples * pace <= MIN_SAMPLES_OVERRUN * policy.max_time_s


def _measurement(taken: list[Sampled], reason: str) -> Measurement:
    judge = tuple(s.judge for s in taken if s.judge is not None)
    issue = tuple(s.issue for s in taken if s.issue is not None)
    return Measurement(tuple(s.timed for s in taken), tuple(s.wall for s in taken), reason,
                       judge if len(judge) == len(taken) else (), issue if len(issue) == len(taken) else (),
                       regime_of(s.regime for s in taken))


def regime_of(regimes: Iterable[str]) -> str:
    """A measurement's regime: the host regime if any sample was timed in it (a gate the watchdog had to open
    switches a timer to it), else the GPU regime if any sample was, else none recorded."""
    found = set(regimes)
    return Regime.HOST if Regime.HOST in found else Regime.GPU if Regime.GPU in found else ""
