"""The host regime starts every timed interval with the GPU idle, on both sides of the judge's rounds.

A start event recorded behind queued work fires only when that work is done, while the host keeps issuing the call's
launches: the time then leaves out a head start. The judge's own host-regime timer had the L2 flush's; the candidate's
call, queued behind the judge's release (inputs, flush, gate) and a switch between the two processes' contexts, had a
longer one, and honest launch-bound copies read 1.01-1.04x of eager on the H100 and H200 (issue: suites at scale).
These tests record the order of the CUDA calls with fakes, so they run without a GPU.
"""

from __future__ import annotations

from types import SimpleNamespace

from kbench.judge.candidate import candidate
from kbench.judge.timing import timed_call, timers
from kbench.judge.timing.timed_call import TimedCalls
from kbench.results.records import Regime


class _Event:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def record(self) -> None:
        self.log.append(f"record {self.name}")

    def synchronize(self) -> None:
        self.log.append(f"wait {self.name}")


def _events(log: list[str]):
    names = iter(["start", "end"] * 100)
    return lambda enable_timing=True: _Event(log, next(names))


class _Flush:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def fill_(self, value: float) -> None:
        self.log.append("flush")


def test_the_judges_host_regime_sample_waits_for_its_flush_before_the_start_event(monkeypatch):
    log: list[str] = []
    monkeypatch.setattr(timers, "_cuda_event", _events(log))
    monkeypatch.setattr(timers, "_cuda_synchronize", lambda device=None: log.append("synchronize"))
    monkeypatch.setattr(timers, "_elapsed_time", lambda start, end: 1.0)
    timer = object.__new__(timers.CudaEventTimer)
    timer._device, timer._clock, timer._gate, timer._flush = "cuda", lambda: 0.0, None, _Flush(log)
    timer.regime = Regime.HOST
    timer.sample(lambda: log.append("call"))
    assert log == ["synchronize", "flush", "synchronize", "record start", "call", "record end", "synchronize"]


class _Page:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def write_on(self, stream: int, offset: int, value: int) -> None:
        self.log.append("open gate")

    def device_word(self, index: int) -> int:
        return 4096 + 4 * index


def _released(monkeypatch, gated: bool, bracket: bool = False) -> list[str]:
    log: list[str] = []
    monkeypatch.setattr(timers, "_cuda_synchronize", lambda device=None: log.append("synchronize"))
    monkeypatch.setattr(timers, "_current_stream", lambda: SimpleNamespace(cuda_stream=7))
    monkeypatch.setattr(timed_call.driver, "wait_value", lambda stream, word, value: log.append(f"wait for {value}"))
    calls = object.__new__(TimedCalls)
    calls.session = SimpleNamespace(copy_in=lambda values: log.append("inputs"))
    calls.page, calls._flush = _Page(log), _Flush(log)
    calls.bracket, calls._bracketed = bracket, False
    calls._events = (_Event(log, "judge's start"), _Event(log, "judge's end"))
    calls._release([1], 3, gated)
    assert calls._bracketed == (bracket and gated)  # the judge's stream waits for DONE: released however it ends
    return log


def test_the_judge_says_go_to_a_host_regime_call_only_once_its_release_is_done(monkeypatch):
    assert _released(monkeypatch, gated=False) == ["inputs", "flush", "open gate", "synchronize"]


def test_a_gated_call_is_released_without_waiting(monkeypatch):
    """In the GPU regime the candidate's call is queued behind its gate already: the judge's clock runs on."""
    assert _released(monkeypatch, gated=True) == ["inputs", "flush", "open gate"]


def test_the_judges_own_bracket_opens_the_gate_between_its_events_and_waits_for_done_on_its_stream(monkeypatch):
    """KBENCH_JUDGE_BRACKET (issue 40's measurement): the judge's first event before the write that opens the gate,
    a wait on its own stream for the call's DONE value, then its second event; in the host regime, no bracket."""
    assert _released(monkeypatch, gated=True, bracket=True) == [
        "inputs", "flush", "record judge's start", "open gate", "wait for 3", "record judge's end"]
    assert _released(monkeypatch, gated=False, bracket=True) == ["inputs", "flush", "open gate", "synchronize"]


def test_the_candidate_starts_its_host_regime_interval_past_the_open_gate(monkeypatch):
    log: list[str] = []
    monkeypatch.setattr(candidate, "_cuda_event", _events(log))
    monkeypatch.setattr(candidate, "_synchronize", lambda device: log.append("synchronize"))
    monkeypatch.setattr(timers, "_current_stream", lambda: SimpleNamespace(cuda_stream=7))
    monkeypatch.setattr(candidate, "_elapsed_time", lambda start, end: 2.0)
    server = candidate.CommandServer()
    server.device = "cuda"
    server.gate = SimpleNamespace(close=lambda stream, value: log.append("wait for gate"))
    server.page = SimpleNamespace(write_on=lambda stream, offset, value: log.append("done"))
    server.model = lambda: log.append("call")
    monkeypatch.setattr(server, "_locate", lambda out: ([], []))
    reply = server.go(SimpleNamespace(value=5))
    assert log == ["wait for gate", "synchronize", "record start", "call", "record end", "done", "synchronize"]
    assert reply["timed_s"] == 2.0e-3
