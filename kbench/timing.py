"""The timer: per-call samples with CUDA events (or a host clock), L2 flush, warm-up, adaptive stopping.

This module captures the clock and CUDA event functions when it is imported, which the worker does
before it imports any solution: a solution that later replaces `torch.cuda.Event`,
`torch.cuda.synchronize` or `time.perf_counter` does not change how it is timed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from collections.abc import Callable, Mapping
from typing import NamedTuple, Protocol

import torch

from kbench.records import Measurement, TimingPolicy
from kbench.stats import mann_whitney_u, median, median_ci_relative, quantile

_perf_counter = time.perf_counter
_sleep = time.sleep
_cuda_event = torch.cuda.Event
_cuda_synchronize = torch.cuda.synchronize
_elapsed_time = torch.cuda.Event.elapsed_time

Clock = Callable[[], float]

L2_FLUSH_FACTOR = 2  # the flush buffer is this many times the GPU's L2 size
STOP_CONVERGED = "converged"
STOP_MAX_TIME = "max_time"


def synchronize(device: str) -> None:
    """Wait for all work on the device, every stream included (the original function, never a replaced one)."""
    if device == "cuda":
        _cuda_synchronize()


SETTLE_S = 1e-3  # the GPU's pause between a round's input refresh and its first timed call


def settle(device: str) -> None:
    """After the inputs of a round are written, wait until the device is idle and then a little longer, so that the
    round's first timed call does not start straight after gigabytes of the harness's own memory traffic (on the
    H100 a call that did ran 1-4% slower than the same call after the other process's round trip)."""
    synchronize(device)
    if device == "cuda":
        _sleep(SETTLE_S)


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
        host_start = self._clock()
        start.record()
        fn()
        end.record()
        issued = self._clock()
        _cuda_synchronize(self._device)
        host = self._clock() - host_start
        self.last_issue = issued - host_start
        return _elapsed_time(start, end) / 1e3, host


class Sampled(NamedTuple):
    """One sample: the timed seconds, the host seconds over the same window in the process that timed it, and, for a
    call timed in another process, the judge's own clock over the whole round trip (None otherwise)."""

    timed: float
    wall: float
    judge: float | None = None
    issue: float | None = None  # host seconds to issue the call (see CudaEventTimer)


Sampler = Callable[[], Sampled]


def local_sampler(fn: Callable[[], object], timer: Timer) -> Sampler:
    """A sampler that times fn in this process."""
    def sample() -> Sampled:
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


def few_samples_warning(m: Measurement, policy: TimingPolicy) -> str | None:
    """A warning when --max-time ended sampling before the minimum sample count: the median is shaky."""
    if m.stop_reason == STOP_MAX_TIME and len(m.samples) < policy.min_samples:
        return (f"[few_samples] only {len(m.samples)} sample(s) before the {policy.max_time_s:g} s cap "
                f"(minimum {policy.min_samples}); raise --max-time for a reliable median")
    return None


# Host time above event time by both margins means work ran outside the timed stream.
HOST_EXCESS_ABS_S = 100e-6
HOST_EXCESS_REL = 0.5


def escaped_work_warning(m: Measurement, baseline_s: float = 0.0) -> str | None:
    """A warning when the host clock saw much more time than the events did (e.g. a side stream). `baseline_s` is the
    excess a call without escaped work shows (for a candidate: its calibration's, which includes the GPU's switch
    between the judge's and the candidate's contexts)."""
    if not m.host_samples:
        return None
    timed, wall = m.median, median(m.host_samples)
    excess = wall - timed - baseline_s
    if excess > HOST_EXCESS_ABS_S and excess > HOST_EXCESS_REL * timed:
        return (
            f"[escaped_timer] host time {wall * 1e3:.3f} ms exceeds event time {timed * 1e3:.3f} ms: "
            "work may run outside the timed stream, so the event time may be too low"
        )
    return None


# The judge's clock over a round trip to the candidate may exceed the candidate's reported time by what the protocol
# costs (measured before the solution was imported), plus these slacks.
TIMER_SLACK_ABS_S = 100e-6
TIMER_SLACK_SPREAD = 4.0  # times the calibration's p90 - p50 spread (pipe and scheduling jitter on this machine now)
TIMER_SLACK_REL = 0.05
# On the CPU the solution's own thread pools (an extension's OpenMP runtime, say) make each round trip cost more than
# the calibration with the reference foresees: the check there only catches gross fakes (a call that took more
# than twice its reported time plus 1 ms).
TIMER_SLACK_ABS_CPU_S = 1e-3
TIMER_SLACK_REL_CPU = 1.0


@dataclass(frozen=True)
class Calibration:
    """What a round trip to the candidate costs beyond its timed window, from no-op samples taken before import."""

    overhead: tuple[float, ...]  # judge round trip minus reported time, per calibration round
    eager: tuple[float, ...] = ()  # the judge's eager samples in the same rounds (a trusted neighbour)
    host_gap: tuple[float, ...] = ()  # the candidate's host window minus its event time, per calibration round

    @property
    def host_gap_p50(self) -> float:
        return quantile(self.host_gap, 0.5) if self.host_gap else 0.0

    @property
    def p50(self) -> float:
        return quantile(self.overhead, 0.5) if self.overhead else 0.0

    @property
    def p90(self) -> float:
        return quantile(self.overhead, 0.9) if self.overhead else 0.0

    def slack(self, timed_median: float, cpu: bool = False) -> float:
        floor, rel = (TIMER_SLACK_ABS_CPU_S, TIMER_SLACK_REL_CPU) if cpu else (TIMER_SLACK_ABS_S, TIMER_SLACK_REL)
        return max(floor, TIMER_SLACK_SPREAD * (self.p90 - self.p50)) + rel * timed_median


def timer_mismatch_warning(m: Measurement, calibration: Calibration, cpu: bool = False) -> str | None:
    """`[timer_mismatch]` when the judge's clock saw more than the reported time plus what the protocol costs.

    The candidate's own timer runs in the solution's process, where anything can be replaced; the judge's clock
    around each round trip cannot be. A call cannot take less than it reports plus the protocol's own cost, so a
    gap beyond the calibrated slack means the reported time is too low (a faked timer, or work the events missed).
    """
    if not m.judge_samples or len(m.judge_samples) != len(m.samples):
        return None
    gap = median([j - t for j, t in zip(m.judge_samples, m.samples)]) - calibration.p50
    slack = calibration.slack(m.median, cpu)
    if gap <= slack:
        return None
    return (f"[timer_mismatch] the judge's clock saw {median(m.judge_samples) * 1e3:.3f} ms per timed round trip, "
            f"the candidate reported {m.median * 1e3:.3f} ms, and the protocol accounts for "
            f"{calibration.p50 * 1e3:.3f} ms (+{slack * 1e3:.3f} ms slack): the reported time is too low")


# The judge's eager samples beside the solution against those beside the trusted calibration candidate (the
# reference itself): slower by this much, and significantly, means the solution's process reached the reference.
DISTURBED_RATIO = 1.15
DISTURBED_P = 0.01


def disturbed_warning(beside: Measurement, calibration: Calibration) -> str | None:
    """`[reference_disturbed]` when the eager reference ran much and significantly slower beside the solution than
    beside the calibration candidate, under the same protocol: work of the solution's (GPU work it queued before its
    process was frozen, say) reached the reference's timed calls.

    Not for a launch-bound reference (`launch_bound_warning`): its time is the judge's host issuing launches, which
    varied by up to 1.8x between processes and phases on the H100 for honest copies of level-3 models (the frozen
    candidate cannot use the CPU, and GPU work it left behind would lengthen the GPU time, making the calls no
    longer launch-bound)."""
    if not beside.samples or not calibration.eager or launch_bound_warning(beside) is not None:
        return None
    ratio = beside.median / median(calibration.eager)
    if ratio <= DISTURBED_RATIO or mann_whitney_u(beside.samples, calibration.eager)[1] >= DISTURBED_P:
        return None
    return (f"[reference_disturbed] the eager reference took {beside.median * 1e3:.3f} ms beside the solution and "
            f"{median(calibration.eager) * 1e3:.3f} ms beside the reference itself ({ratio:.2f}x): "
            "something slowed the reference while it was timed")


# Issuing a call's work takes the host this share of the GPU time or more: the GPU waits on launches, and the time
# measures the host's launch overhead (Python, dispatch, driver) as much as the kernels.
LAUNCH_BOUND_SHARE = 0.8


def launch_bound_warning(m: Measurement) -> str | None:
    """`[launch_bound]` when the host's time to issue a call comes close to the call's GPU time."""
    if not m.issue_samples or not m.samples:
        return None
    issue = median(m.issue_samples)
    if issue < LAUNCH_BOUND_SHARE * m.median:
        return None
    return (f"[launch_bound] the host takes {issue * 1e3:.3f} ms to issue a call whose GPU time is {m.median * 1e3:.3f} ms: "
            "launch overhead dominates, and the time follows the host CPU's speed (fewer, larger kernels or a CUDA "
            "graph would help)")
