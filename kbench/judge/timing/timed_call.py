"""The judge's side of one timed call of the candidate (docs/timing.md): arm, release, watch, verify.

1. **Arm.** The candidate gets ready: in the GPU regime it issues the call now, behind a closed gate, with a write
   of the DONE word after its end event; in the host regime it just answers.
2. **Release** (the judge's clock starts). The judge writes the round's inputs into the shared buffers and flushes
   the L2 cache, then its own stream opens the gate. Nothing before this point could use the round's values, so
   everything the call needs lies inside the judge's window.
3. **Watch.** GPU regime: the judge waits for the DONE word, which the candidate's stream writes when the call's
   work is over, asking the candidate's process nothing. Host regime: the judge sends `Go` and waits for the answer.
4. **Verify** (the judge's clock stops). The judge reads a few hundred of the outputs' elements, drawn at random after
   the call, where they lie (kbench.judge.candidate.outputs) and compares them with the reference's output. A stream
   that wrote DONE before its work was over, or a process that answered early, fails here: either the judge's reads
   wait for the remaining work (the GPU runs one process's work at a time) or they find it unfinished.

The candidate's reported time is then bounded by that window (kbench.judge.timing.checks.timer_mismatch_warning).

With KBENCH_JUDGE_BRACKET=1 (a measurement for issue 40, off by default) the judge also times each gated call on the
GPU from its own stream: an event before the write that opens the gate, then a wait on that stream for the DONE word
and an event after it (`Observed.bracket`). The bracket exceeds the call by what switching between the two processes'
contexts costs; whether that excess is steady enough to resolve a shave of a few microseconds, and whether the
waiting stream slows the call, is what the figures it records are for (diagnostics.protocol.bracket_excess_s).
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from typing import Any

import torch

from kbench.judge.candidate import protocol
from kbench.judge.candidate.outputs import OutputViews
from kbench.judge.candidate.session import Session
from kbench.judge.checks import comparison
from kbench.judge.timing import driver, timers
from kbench.judge.timing.gate import Gate, SignalPage
from kbench.judge.verdict import Verdict
from kbench.results.records import Regime, Status

_perf_counter = time.perf_counter
_tensor_type = torch.Tensor
ARM_DEADLINE_S = 1.0  # a gated call not issued by then waits for the GPU while issued: the judge opens its gate
DONE_DEADLINE_S = 600.0  # a timed call's stream that has not signalled by then never will
SPOT_ELEMENTS = 256  # elements of each output read at random to verify a timed call
BRACKET_ENV = "KBENCH_JUDGE_BRACKET"  # "1": the judge's own GPU bracket around each gated call (a measurement)


@dataclass(frozen=True)
class Observed:
    """One timed call as the judge saw it (seconds)."""

    timed: float  # what the candidate reported
    window: float  # the judge's clock from the release to the outputs verified
    arm: float  # the judge's clock over the Arm request (a gated call is issued inside it)
    issue: float  # the candidate's own report of its time to issue the call
    regime: Regime
    forced: bool = False  # gated, but the call waited for the GPU while issued: the judge opened the gate; no sample
    done: float = 0.0  # the judge's clock from the release to the DONE word (GPU regime) or the answer (host regime)
    bracket: float | None = None  # the judge's stream's events around the gate's opening and DONE (BRACKET_ENV)

    @property
    def verify(self) -> float:
        """The judge's clock from the candidate's signal to its outputs verified (the rest of the window)."""
        return self.window - self.done


class TimedCalls:
    """Timed calls of the session's bound model, on the judge's values, verified against the reference's outputs."""

    def __init__(self, session: Session, atol: float, rtol: float) -> None:
        self.session = session
        self.cuda = session.device == "cuda"
        self.atol, self.rtol = atol, rtol
        self.page = SignalPage.within(session.page_tensor) if self.cuda else None
        self.views = OutputViews()
        self.outputs: list[Any] = []  # the last call's outputs, where they lie
        # The candidate's gate, as the judge counts its values: they go on from the page's (timing.gate.Gate).
        self.gate = Gate(self.page) if self.page is not None else None
        self._flush: torch.Tensor | None = None
        self.switch_s = 0.0  # the judge's seconds thawing and freezing the candidate around its calls
        self.bracket = self.page is not None and os.environ.get(BRACKET_ENV) == "1"
        self._events: tuple[Any, Any] | None = None  # the bracket's two events, made on first use
        self._bracketed = False  # the judge's stream waits for this call's DONE (released however the call ends)
        self._generator: torch.Generator | None = None

    def sample(self, regime: Regime, values: list[Any], expected: Any, label: str = "a timed call") -> Observed:
        """One timed call on `values` in `regime` (the host regime on the CPU), verified against `expected` (the
        reference's output on them)."""
        regime = regime if self.cuda else Regime.HOST
        gated = regime == Regime.GPU
        session, cand = self.session, self.session.cand
        if not session.fits(values):
            session.bind(session.name, values)
        value = self.gate.next_value() if self.gate is not None else 0
        chosen = self._spots(expected)  # drawn in the judge's own memory before the call: the candidate cannot see them
        thawing = _perf_counter()
        cand.thaw()
        self.switch_s += _perf_counter() - thawing
        bracket = None
        try:
            sent = _perf_counter()
            cand.send(protocol.Arm(regime, value))
            if gated and not cand.ready(ARM_DEADLINE_S):
                return self._forced(value, _perf_counter() - sent)
            armed = _answer(cand.receive())
            arm = _perf_counter() - sent
            start = _perf_counter()
            self._release(values, value, gated)
            if gated:
                self._await_done(value)
                reply = armed
            else:
                cand.send(protocol.Go(value))
                reply = _answer(cand.receive())
            done = _perf_counter() - start
            self.outputs = self._views(reply, label)
            self._verify(chosen, expected, label)
            window = _perf_counter() - start
            bracket = self._bracket_seconds()
            if gated:
                cand.send(protocol.Report())
                reply = _answer(cand.receive())
        finally:
            if self._bracketed:  # the call ended another way: the judge's stream must not wait for ever
                assert self.page is not None
                self.page.write(SignalPage.DONE, value)
                self._bracketed = False
            freezing = _perf_counter()
            cand.freeze()
            self.switch_s += _perf_counter() - freezing
        return Observed(reply.timed_s, window, arm, reply.issue_s, regime, done=done, bracket=bracket)

    def _forced(self, value: int, arm: float) -> Observed:
        """The gated call is still being issued: it waits for the GPU. Open its gate so that it finishes (on stale
        inputs: nothing of this call is kept), and say so."""
        assert self.page is not None
        self.page.write(SignalPage.FLAG, value)
        armed = self.session.cand.receive()
        if armed.ok:
            self._await_done(value)
        return Observed(0.0, 0.0, arm, armed.issue_s, Regime.GPU, forced=True)

    def _release(self, values: list[Any], value: int, gated: bool = True) -> None:
        """The round's inputs into the shared buffers, the L2 flushed, then the gate opened by the judge's stream. In
        the host regime the judge waits until that is done before it says `Go`: the candidate's start event then
        fires as its host starts issuing, as the judge's own host-regime timer's does after its flush
        (timing.timers.CudaEventTimer). Queued behind the release, it would fire only once the GPU had copied
        the inputs, flushed and switched contexts, while the candidate's host issued launches uncounted meanwhile:
        honest launch-bound copies read 1.01-1.04x of eager that way on the H100 and H200."""
        self.session.copy_in(values)
        if self.page is None:
            return
        if self._flush is None:
            l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
            self._flush = torch.empty(max(timers.L2_FLUSH_FACTOR * l2 // 4, 1 << 20), dtype=torch.float32,
                                      device="cuda")
        self._flush.fill_(1.0)
        stream = timers.current_stream_handle()
        if gated and self.bracket:
            if self._events is None:
                self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self._events[0].record()
        self.page.write_on(stream, SignalPage.FLAG, value)
        if gated and self.bracket:
            assert self._events is not None
            driver.wait_value(stream, self.page.device_word(SignalPage.DONE), value)
            self._bracketed = True
            self._events[1].record()
        if not gated:
            timers.synchronize("cuda")

    def _bracket_seconds(self) -> float | None:
        """The judge's GPU bracket of the call just verified (its stream went past DONE: the host saw it written)."""
        if not self._bracketed or self._events is None:
            return None
        self._bracketed = False
        self._events[1].synchronize()
        return float(self._events[0].elapsed_time(self._events[1])) / 1e3

    def _await_done(self, value: int) -> None:
        assert self.page is not None
        deadline = _perf_counter() + DONE_DEADLINE_S
        while self.page.read(SignalPage.DONE) != value:
            if _perf_counter() > deadline:
                raise Verdict(Status.TIMEOUT,
                              f"a timed call's stream did not signal its end within {DONE_DEADLINE_S:g} s")

    def _views(self, reply: protocol.Reply, label: str) -> list[Any]:
        """The outputs where they lie, checked against the reference's buffers; plain numbers from the reply."""
        buffers = self.session.buffers[self.session.name]
        if len(reply.outputs) != len(buffers):
            raise Verdict(Status.RUNTIME_ERROR, f"the solution's process described {len(reply.outputs)} outputs for "
                                           f"{len(buffers)} (in {label})")
        numbers = iter(reply.values)
        self.session.values = reply.values
        return [next(numbers, None) if buf is None else self.views.view(where, buf, f"{label}'s output {i}")
                for i, (where, buf) in enumerate(zip(reply.outputs, buffers))]

    def _spots(self, expected: Any) -> list[Any] | None:
        return None if expected is None else spots(expected, self._random())

    def _verify(self, chosen: list[Any] | None, expected: Any, label: str) -> None:
        """Read SPOT_ELEMENTS random elements of each output where it lies and compare them with `expected`'s."""
        if chosen is None or spot_check(self.outputs, chosen, self.atol, self.rtol):
            return
        ok, fig = comparison.compare(self.outputs, expected, self.atol, self.rtol)
        if not ok:
            raise Verdict(Status.INCORRECT, f"{label}: {fig['message']} (its inputs were fresh, and the outputs of "
                                            "earlier calls were right)")
        raise Verdict(Status.INCORRECT, f"{label}: its outputs were not complete when the solution's process said "
                                        "the call was over (they were a moment later)")

    def _random(self) -> torch.Generator | None:
        if self._generator is None:
            self._generator = torch.Generator(device=self.session.device)
            self._generator.manual_seed(secrets.randbits(62))
        return self._generator

    def place(self, pages: int) -> None:
        """A new draw of the candidate's memory (Session.place), once the judge has unmapped every output of the
        candidate's it had mapped: the allocations the draw hands back are then freed, not kept alive by the judge's
        mappings (and read there as a later call's outputs). The draw's untimed call's outputs are mapped now: a
        timed call's outputs on the same allocations are then read without mapping them inside its window."""
        self.outputs = []
        self.views.close()
        self.outputs = self._views(self.session.place(pages), "a call after a memory draw")

    def close(self) -> None:
        self.outputs = []
        self.views.close()
        if self.page is not None:
            self.page.release()


def _answer(reply: protocol.Reply) -> protocol.Reply:
    if not reply.ok:
        raise Verdict(reply.status, reply.message)
    return reply


def spots(expected: Any, generator: Any, count: int = SPOT_ELEMENTS) -> list[Any]:
    """For each tensor of `expected`: `count` coordinates drawn from `generator` and the expected values there (None for
    a number or an empty tensor)."""
    wanted = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    chosen: list[Any] = []
    for ref in wanted:
        if not isinstance(ref, _tensor_type) or ref.numel() == 0:
            chosen.append(None)
            continue
        if ref.dim() == 0:
            chosen.append(((), ref.reshape(1).to(torch.float64)))
            continue
        coords = tuple(torch.randint(0, n, (count,), device=ref.device, generator=generator) for n in ref.shape)
        chosen.append((coords, ref[coords].to(torch.float64)))
    return chosen


def spot_check(outputs: list[Any], chosen: list[Any], atol: float, rtol: float) -> bool:
    """Whether each tensor output matches the expected values at its chosen coordinates (`spots`) within
    atol + rtol * |expected| (NaN matches only NaN). Reads only those elements, however the outputs are laid out."""
    good: Any = None
    for out, spot in zip(outputs, chosen):
        if spot is None:
            continue
        coords, want = spot
        if (not isinstance(out, _tensor_type) or (coords and out.dim() != len(coords))
                or (not coords and out.numel() != 1)):
            return False
        got = out.reshape(1) if not coords else out[coords]
        close = torch.isclose(got.to(torch.float64), want, rtol=rtol, atol=atol, equal_nan=True).all()
        good = close if good is None else good & close
    return good is None or bool(good)
