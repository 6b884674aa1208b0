"""The timers: per-call samples with CUDA events (in the GPU or the host regime) or with the host clock.

This module captures the clock and CUDA event functions when it is imported, which the worker does before it imports
any solution: a solution that later replaces `torch.cuda.Event`, `torch.cuda.synchronize` or `time.perf_counter`
does not change how the judge and the reference's process time. (The candidate's own timing lives in the solution's
process, where anything can be replaced: the judge bounds it with its own clock, kbench.judge.timing.timed_call.)
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import torch

from kbench.judge.timing.gate import Gate, SignalPage, Watchdog
from kbench.results.records import Regime
from kbench.results.stats import median

_perf_counter = time.perf_counter
_cuda_event = torch.cuda.Event
_cuda_synchronize = torch.cuda.synchronize
_elapsed_time = torch.cuda.Event.elapsed_time
_current_stream = torch.cuda.current_stream

Clock = Callable[[], float]

L2_FLUSH_FACTOR = 2  # the flush buffer is this many times the GPU's L2 size


def current_stream_handle() -> int:
    """The current CUDA stream's handle (through the original function, never a replaced one)."""
    return int(_current_stream().cuda_stream)


def synchronize(device: str) -> None:
    """Wait for all work on the device, every stream included (the original function, never a replaced one)."""
    if device == "cuda":
        _cuda_synchronize()


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
    regime: Regime  # what the samples' times include (see CudaEventTimer)

    def sample(self, fn: Callable[[], object]) -> tuple[float, float]:
        """Run fn once; return (timed seconds, host wall seconds over the same window)."""

    def use(self, regime: Regime) -> None:
        """Time in `regime` from now on (a CPU timer stays in the host regime)."""

    def decide(self, fn: Callable[[], object], calls: int = 3) -> Regime:
        """Choose fn's regime and use it (see CudaEventTimer.decide)."""


GATE_DEADLINE_S = 1.0  # a call still being issued this long behind a closed gate waits for the GPU itself


class HostTimer:
    """CPU timing: the host clock around the call; nothing to flush or synchronize."""

    def __init__(self, clock: Clock = _perf_counter) -> None:
        self._clock = clock
        self.last_issue = 0.0
        self.last_forced = False
        self.regime = Regime.HOST

    def sample(self, fn: Callable[[], object]) -> tuple[float, float]:
        with no_collection():
            start = self._clock()
            fn()
            elapsed = self._clock() - start
        self.last_issue = elapsed
        return elapsed, elapsed

    def use(self, regime: Regime) -> None:
        """On the CPU the host runs the call: the host regime, whatever is asked."""

    def decide(self, fn: Callable[[], object], calls: int = 3) -> Regime:
        """On the CPU the host runs the call: the host regime, always."""
        return self.regime


class CudaEventTimer:
    """GPU timing with events on the current stream, after an L2 flush, in one of two regimes.

    Per sample, in the host regime: synchronize; overwrite a buffer twice the L2 size (so no input or weight is
    served from L2); synchronize (the GPU idle when the host starts); record start; call; record end;
    synchronize. Only the call lies between the events, and the GPU waits for the host to issue each of its
    launches. In the GPU regime (`Regime.GPU`) the same but the second synchronize, with the
    start event, the call and the end event issued behind a closed gate (kbench.judge.timing.gate) that opens once the
    end event is issued: the call's work is all queued before the GPU starts on it, so the events time its GPU work
    alone, as Triton's do_bench does by issuing calls back to back. A call that waits for the GPU while it is
    issued cannot run behind a gate: the watchdog opens it, and the timer times in the host regime from then on.

    The host clock is read before the start event, after the end event is recorded (`last_issue`: how long the
    host took to issue the call's work) and after the synchronize; the wall time of a sample runs from the start
    event (host regime) or from the gate's opening (GPU regime) to the synchronize.
    """

    def __init__(self, device: torch.device, clock: Clock = _perf_counter, regime: Regime = Regime.HOST) -> None:
        self._device = device
        self._clock = clock
        self.last_issue = 0.0
        self.last_forced = False
        self.regime = Regime.HOST
        self._gate: tuple[Any, Any] | None = None
        l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
        self._flush = torch.empty(max(L2_FLUSH_FACTOR * l2_bytes // 4, 1 << 20), dtype=torch.float32, device=device)
        self.use(regime)

    def use(self, regime: Regime) -> None:
        """Time in `regime` from now on (the gate is made on first use of the GPU regime)."""
        if regime == Regime.GPU and self._gate is None:
            gate = Gate(SignalPage.private())
            self._gate = (gate, Watchdog(gate, GATE_DEADLINE_S))
        self.regime = regime

    def sample(self, fn: Callable[[], object]) -> tuple[float, float]:
        if self.regime == Regime.GPU:
            return self._gated(fn)
        start, end = self._prepare()
        # The flush is over before the host starts issuing: a start event recorded behind queued work fires only once
        # that work is done, while the host has been issuing the call's launches meanwhile, so the time would leave
        # out that head start, and a head start that differs between processes (the candidate's call waits behind
        # the judge's release, kbench.judge.timing.timed_call) reads as a speedup of launch-bound copies.
        _cuda_synchronize(self._device)
        with no_collection():
            host_start, issued = self._issue(fn, start, end)
        _cuda_synchronize(self._device)
        host = self._clock() - host_start
        self.last_issue, self.last_forced = issued - host_start, False
        return _elapsed_time(start, end) / 1e3, host

    def _gated(self, fn: Callable[[], object]) -> tuple[float, float]:
        assert self._gate is not None
        gate, watchdog = self._gate
        start, end = self._prepare()
        value = gate.close(_current_stream().cuda_stream)
        watchdog.arm(value)
        with no_collection():
            host_start, issued = self._issue(fn, start, end)
            gate.open(value)
            watchdog.disarm()
        _cuda_synchronize(self._device)
        host = self._clock() - issued
        self.last_issue, self.last_forced = issued - host_start, gate.forced
        if gate.forced:
            self.regime = Regime.HOST
        return _elapsed_time(start, end) / 1e3, host

    def _prepare(self) -> tuple[Any, Any]:
        """Two fresh timing events, after the GPU has finished all earlier work and the L2 flush is queued."""
        events = _cuda_event(enable_timing=True), _cuda_event(enable_timing=True)
        _cuda_synchronize(self._device)
        self._flush.fill_(1.0)
        return events

    def _issue(self, fn: Callable[[], object], start: Any, end: Any) -> tuple[float, float]:
        """Issue the timed interval: the call between the two events. Returns the host clock before the start event
        and after the end event is recorded, in seconds."""
        host_start = self._clock()
        start.record()
        fn()
        end.record()
        return host_start, self._clock()

    def decide(self, fn: Callable[[], object], calls: int = 3) -> Regime:
        """Choose the regime for fn (and use it): the GPU regime when its calls' work is queued faster than the GPU runs
        it (`gpu_bound`); the host regime for launch-bound calls and calls that wait for the GPU while issued."""
        self.use(Regime.HOST)
        issue = []
        for _ in range(calls):
            self.sample(fn)
            issue.append(self.last_issue)
        self.use(Regime.GPU)
        gpu = []
        for _ in range(calls):
            gpu.append(self.sample(fn)[0])
            if self.last_forced:
                return self.regime
        self.use(Regime.GPU if gpu_bound(issue[1:], gpu[1:]) else Regime.HOST)
        return self.regime


def gpu_bound(issue: Sequence[float], gpu: Sequence[float]) -> bool:
    """Whether a call's work is queued faster than the GPU runs it: the host's median time to issue it is below the
    median GPU time of the call issued behind a gate. Such a call is timed in the GPU regime, where hiding the
    host's time is what back-to-back timing (do_bench) also does; a launch-bound one keeps the host in its time."""
    return bool(issue) and bool(gpu) and median(issue) < median(gpu)
