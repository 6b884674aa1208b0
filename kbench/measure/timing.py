"""The timer: per-call samples with CUDA events (or a host clock), L2 flush, warm-up, adaptive stopping.

This module captures the clock and CUDA event functions when it is imported, which the worker does
before it imports any solution: a solution that later replaces `torch.cuda.Event`,
`torch.cuda.synchronize` or `time.perf_counter` does not change how it is timed.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import NamedTuple, Protocol

import torch

from kbench.results.records import Measurement, TimingPolicy
from kbench.results.stats import median_ci_relative
from kbench.measure.timing_checks import (  # noqa: F401 - re-exported: the protocol's warnings live beside it
    DISTURBED_P, DISTURBED_RATIO, HOST_EXCESS_ABS_S, HOST_EXCESS_REL, LAUNCH_BOUND_SHARE, STOP_CONVERGED, STOP_MAX_TIME,
    TIMER_SLACK_ABS_CPU_S, TIMER_SLACK_ABS_S, TIMER_SLACK_REL, TIMER_SLACK_REL_CPU, TIMER_SLACK_SPREAD, Calibration,
    disturbed_warning, escaped_work_warning, few_samples_warning, issue_bound, launch_bound_warning,
    level_moved_warning, timer_mismatch_warning,
)

_perf_counter = time.perf_counter
_cuda_event = torch.cuda.Event
_cuda_synchronize = torch.cuda.synchronize
_elapsed_time = torch.cuda.Event.elapsed_time

Clock = Callable[[], float]

L2_FLUSH_FACTOR = 2  # the flush buffer is this many times the GPU's L2 size


def synchronize(device: str) -> None:
    """Wait for all work on the device, every stream included (the original function, never a replaced one)."""
    if device == "cuda":
        _cuda_synchronize()


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


@contextmanager
def no_collection() -> Iterator[None]:
    """Python's garbage collector paused for a timed window (as timeit does): a collection that happens to fall
    inside one call, and not inside the other side's, would be charged to that call alone."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class Timer(Protocol):
    last_issue: float  # host seconds the last sample's call took to return (to issue its work, on a GPU)

    def sample(self, fn: Callable[[], object]) -> tuple[float, float]:
        """Run fn once; return (timed seconds, host wall seconds over the same window)."""


class HostTimer:
    """CPU timing: the host clock around the call; nothing to flush or synchronize."""

    def __init__(self, clock: Clock = _perf_counter) -> None:
        self._clock = clock
        self.last_issue = 0.0

    def sample(self, fn: Callable[[], object]) -> tuple[float, float]:
        with no_collection():
            start = self._clock()
            fn()
            elapsed = self._clock() - start
        self.last_issue = elapsed
        return elapsed, elapsed


class CudaEventTimer:
    """GPU timing with events on the current stream, after an L2 flush, with a host-clock cross-check.

    Per sample: synchronize; overwrite a buffer twice the L2 size (so no input or weight is served
    from L2); record start; call; record end; synchronize. Only the call lies between the events.
    The host clock is read before the start event, after the end event is recorded (`last_issue`: how long the
    host took to issue the call's work) and after the synchronize (the wall time).
    """

    def __init__(self, device: object, clock: Clock = _perf_counter) -> None:
        self._device = device
        self._clock = clock
        self.last_issue = 0.0
        l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
        self._flush = torch.empty(max(L2_FLUSH_FACTOR * l2_bytes // 4, 1 << 20), dtype=torch.float32, device=device)

    def sample(self, fn: Callable[[], object]) -> tuple[float, float]:
        start, end = _cuda_event(enable_timing=True), _cuda_event(enable_timing=True)
        _cuda_synchronize(self._device)
        self._flush.fill_(1.0)
        with no_collection():
            host_start = self._clock()
            start.record()
            fn()
            end.record()
            issued = self._clock()
        _cuda_synchronize(self._device)
        host = self._clock() - host_start
        self.last_issue = issued - host_start
        return _elapsed_time(start, end) / 1e3, host


def launch_bound(fn: Callable[[], object], timer: Timer, calls: int = 3) -> bool:
    """Whether fn's calls are launch-bound (`issue_bound`) on a GPU timer: `calls` timed calls (warm-up included)."""
    timed, issue = [], []
    for _ in range(calls):
        timed.append(timer.sample(fn)[0])
        issue.append(timer.last_issue)
    return issue_bound(issue[1:], timed[1:])


def primes(device: str, fn: Callable[[], object], timer: Timer) -> bool:
    """Whether fn's timed calls go behind an untimed one (`local_sampler`): on a GPU, when they are launch-bound."""
    return device == "cuda" and launch_bound(fn, timer)


class Sampled(NamedTuple):
    """One sample: the timed seconds, the host seconds over the same window in the process that timed it, and, for a
    call timed in another process, the judge's own clock over the whole round trip (None otherwise)."""

    timed: float
    wall: float
    judge: float | None = None
    issue: float | None = None  # host seconds to issue the call (see CudaEventTimer)


Sampler = Callable[[], Sampled]


def local_sampler(fn: Callable[[], object], timer: Timer, primed: bool = False) -> Sampler:
    """A sampler that times fn in this process; `primed`: each timed call right after an untimed one (for a
    launch-bound call, whose time is the host's: see the README's "Timing protocol")."""
    def sample() -> Sampled:
        if primed:
            fn()
        timed, wall = timer.sample(fn)
        return Sampled(timed, wall, None, timer.last_issue)

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
) -> dict[str, Measurement]:
    """Sample several callables in alternating rounds, so that drift (clocks, heat) hits all alike.

    Each round takes one sample of every sampler, in forward order on even rounds and reverse order
    on odd ones (`alternate=False`: forward order in every round, so each sampler always follows the same one). `before_round(i)` runs before round i (fresh inputs: round -1 before the warm-up) and
    `after_round(i)` after it (output checks); both lie outside every timed interval. Sampling stops
    when every sampler has converged (see `converged`) or when the loop has run for `max_time_s`,
    whichever comes first; at least one round always runs.
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
        if all(converged([s.timed for s in taken[n]], elapsed, policy) for n in names):
            reason = STOP_CONVERGED
            break
        if elapsed >= policy.max_time_s:
            reason = STOP_MAX_TIME
            break
    return {n: _measurement(taken[n], reason) for n in names}


def _measurement(taken: list[Sampled], reason: str) -> Measurement:
    judge = tuple(s.judge for s in taken if s.judge is not None)
    issue = tuple(s.issue for s in taken if s.issue is not None)
    return Measurement(tuple(s.timed for s in taken), tuple(s.wall for s in taken), reason,
                       judge if len(judge) == len(taken) else (), issue if len(issue) == len(taken) else ())
