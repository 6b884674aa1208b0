"""The steps of the judge's timed rounds of a solution (kbench.judge.timing.judge_timing.time_rounds), and the state
they share."""

from __future__ import annotations

import dataclasses
import random
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from kbench.config.run_config import TimingPolicy
from kbench.judge.candidate.session import Session
from kbench.judge.checks import comparison, correctness
from kbench.judge.harness import make_timer
from kbench.judge.timing import placement, sampling, timers
from kbench.judge.timing.checks import Calibration
from kbench.judge.timing.timed_call import Observed, TimedCalls
from kbench.judge.verdict import Verdict, short
from kbench.results.diagnostics import RegimeDecision, TimingSpend
from kbench.results.records import Regime, Status
from kbench.results.stats import median
from kbench.wire.jobs import Judging

_perf_counter = time.perf_counter
REGIME_ROUNDS = 5  # gated calls of the solution that decide its regime
# The judge's bound needs its medians steady: a call under BOUND_SHORT_S in the GPU regime, whose tenth is a few tens
# of microseconds, is timed in at least BOUND_ROUNDS rounds (on the H100 the excess of 10-20 rounds moved by ~20 us).
BOUND_SHORT_S = 2e-3
BOUND_ROUNDS = 50


RECHECK_BUDGET = 0.25  # full comparisons may cost, on average, this share of a round's two timed calls
RECHECK_FLOOR = 0.05  # however costly, at least this share of the calls is compared in full
RECHECK_FIRST = 5  # calls compared among the first rounds (one when comparisons are costly)


class Rechecks:
    """Which timed calls are compared in full with the reference after their round (every call's outputs are also
    spot-checked inside the judge's window, kbench.judge.timing.timed_call): every call while a full comparison costs at
    most RECHECK_BUDGET of the round's timed calls; otherwise the last call, random calls among the first rounds, and
    a random share of the rest that keeps the comparisons within that budget on average (at least RECHECK_FLOOR)."""

    def __init__(self, rng: Any, first_rounds: int) -> None:
        self.rng = rng
        self.first = set(rng.sample(range(first_rounds), min(RECHECK_FIRST, first_rounds)))
        self.cost_s = 0.0  # the last full comparison's seconds
        self.round_s = 0.0  # the last round's timed seconds (both sides)

    @property
    def share(self) -> float:
        if self.cost_s <= RECHECK_BUDGET * self.round_s:
            return 1.0
        return max(RECHECK_FLOOR, RECHECK_BUDGET * self.round_s / self.cost_s)

    @property
    def every_call(self) -> bool:
        return self.share >= 1.0

    def wanted(self, index: int) -> bool:
        if self.every_call or self.rng.random() < self.share:
            return True
        if index in self.first:
            if self.share < RECHECK_BUDGET:  # costly: one among the first rounds is enough
                self.first.clear()
            return True
        return False


class SolutionRounds:
    """The state the steps of the timed rounds share (`time_rounds`): this round's inputs and reference output, the
    judge's second set of inputs (primed rounds), the recheck count and the seconds spent outside the samples."""

    def __init__(self, job: Judging, session: Session, reference: Any, make: Callable[[int], list[Any]],
                 calibration: Calibration, witness: Session | None = None, host_only: bool = False) -> None:
        self.job, self.session, self.reference, self.make = job, session, reference, make
        self.calibration = calibration
        self.calls = TimedCalls(session, job.atol, job.rtol)
        # A trusted process holding only the reference, timed through the same protocol in every round beside the
        # solution (`witnessed`): what the protocol costs in these rounds, whatever the host's speed did meanwhile.
        self.witness = TimedCalls(witness, job.atol, job.rtol) if witness is not None else None
        self.witnessed: list[Observed] = []
        self.witness_failure = ""  # why the witness stopped, if it did (the harness's failure, never the solution's)
        self.host_only = host_only  # timed in the host regime, undecided (after a first [regime_changed])
        self.timer = make_timer(job.device)
        self.timer.use(Regime.HOST if calibration.reference_launch_bound else Regime.GPU)
        self.primed = job.device == "cuda" and calibration.reference_launch_bound
        self.regime = Regime.HOST
        self.base = secrets.randbits(30)  # unpredictable seeds: no output can be computed ahead of its call
        self.inputs: list[Any] | None = None
        self.ref: Any = None
        self.second: list[Any] | None = None
        self.seen: list[Observed] = []
        self.decision = RegimeDecision()  # what decided the regime (`decide`)
        self.round = -1  # the round under way (-1: the warm-up)
        self.eager_s = 0.0
        self.rechecks = Rechecks(random.Random(secrets.randbits(64)), job.timing.min_samples)
        self.checked, self.count = -2, 0
        self.refresh_s = self.check_s = 0.0
        self.spent = {f.name: 0.0 for f in dataclasses.fields(TimingSpend)}  # `spend`: where the seconds went
        # Each side's memory drawn anew every placement.GROUP_ROUNDS rounds (a call that allocates much): PROBE_GROUPS
        # draws, and GROUPS where a side's speed moved between them (`drawing` stays set)
        # (on CUDA GPU-regime rows only: not beside a witness, whose calls draw nothing, nor a launch-bound reference)
        self.placed = self.drawing = session.big_call and not self.primed and witness is None
        self.draws = 0
        self.draw = placement.MemoryDraw(job.device)
        self.draw_rng = random.Random(secrets.randbits(64))
        self.times: dict[str, list[float]] = {"eager": [], "solution": []}  # the rounds' samples, each side's

    def decide(self) -> str:
        """The solution's regime (`_decide`). On CUDA a host-regime row draws no memory: its time is the host's."""
        with self._spending("decide_s"):
            regime = self._decide()
        if regime != Regime.GPU and self.job.device == "cuda":
            self.placed = self.drawing = False
        return regime

    def _decide(self) -> str:
        """The solution's regime, from what the judge saw of REGIME_ROUNDS gated calls (on CUDA): the GPU regime when
        the call's issue time as the judge's clock sees it (the Arm request less the protocol's part) is below its
        GPU time as the judge's window sees it (less the protocol's part); the host regime for a launch-bound call or
        one that waits for the GPU while issued. With `host_only`, the host regime, undecided."""
        if self.host_only:
            self.decision = RegimeDecision("timed again in the host regime: the GPU regime's call was launch-bound")
            return self.regime
        if self.job.device != "cuda" or not self.calibration.excess(Regime.GPU):
            self.decision = RegimeDecision("no GPU regime on this device or problem")
            return self.regime
        seen = []
        for index in range(REGIME_ROUNDS):
            values = self.make(self.base - 1 - index)
            expected = self.reference(*values)
            seen.append(self.calls.sample(Regime.GPU, values, expected, "a call of the solution"))
            if seen[-1].forced:
                self.decision = RegimeDecision("the call waits for the GPU while it is issued")
                return self.regime
        issue, gpu = self.judged(seen[1:])
        self.regime = Regime.GPU if issue < gpu else Regime.HOST
        self.decision = RegimeDecision(issue_s=issue, gpu_s=gpu)
        return self.regime

    def stopping_rule(self, policy: TimingPolicy) -> TimingPolicy:
        """The rounds' stopping rule: the run's, with at least BOUND_ROUNDS rounds for a short GPU-regime call."""
        short = self.regime == Regime.GPU and (self.decision.gpu_s or 0.0) < BOUND_SHORT_S
        return dataclasses.replace(policy, min_samples=max(policy.min_samples, BOUND_ROUNDS)) if short else policy

    def kept(self) -> Callable[[Any], Any] | None:
        """Which samples of a side count (sampling.measure_rounds): its fastest draws of memory where the rounds draw
        it (placement.fastest_groups), else all."""
        return placement.fastest_groups if self.placed else None

    def more(self, rounds: int) -> bool:
        """Whether rounds must go on for the draws (sampling.measure_rounds): PROBE_GROUPS of them, and GROUPS where
        a side's speed moved between the first."""
        wanted = placement.GROUPS if self.drawing else placement.PROBE_GROUPS if self.placed else 0
        return rounds < wanted * placement.GROUP_ROUNDS

    def stuck(self, rounds: int) -> bool:
        """Whether more rounds are futile (sampling.measure_rounds): after GROUPS whole draws, a side ran at the
        other's slow speed on every one of them (placement.stuck); the row is then timed again in a fresh process,
        or is `suspect`, whatever more draws in this one would find (on one H200 a stuck side drew 46 of 46 slow)."""
        return (self.drawing and rounds >= placement.GROUPS * placement.GROUP_ROUNDS
                and rounds % placement.GROUP_ROUNDS == 0
                and placement.stuck(self.times["solution"], self.times["eager"]) != "")

    def judged(self, seen: list[Observed]) -> tuple[float, float]:
        """The calls' median issue and GPU times as the judge's own clock sees them (seconds)."""
        cal = self.calibration
        issue = median([o.arm for o in seen]) - median(cal.arm_overhead)
        gpu = median([o.done for o in seen]) - median(cal.excess(Regime.GPU))
        return issue, gpu

    def before(self, index: int) -> None:
        self.round = index
        start = _perf_counter()
        self.inputs = self.ref = None  # the last round's go before this round's are made
        self.inputs = self.make(self.base + index + 1)
        if self.drawing and index >= 0 and index % placement.GROUP_ROUNDS == 0:
            if index == placement.PROBE_GROUPS * placement.GROUP_ROUNDS and not placement.moved(
                    self.times["solution"], self.times["eager"]):
                self.drawing = False  # neither side's speed moved with its memory: no more draws
            else:
                with self._spending("draws_s"):
                    self.redraw()
        self.refresh_s += _perf_counter() - start
        with self._spending("settle_s"):
            sampling.settle(self.job.device)

    def redraw(self) -> None:
        """Both sides' memory drawn anew (kbench.judge.timing.placement), outside every timed interval: the judge's,
        then one untimed eager call on this round's inputs; the candidate's, with one untimed call of the solution."""
        inputs = self.inputs
        assert inputs is not None
        self.draw.both(self.calls, self.draw_rng, lambda: self.reference(*inputs))
        self.draws += 1

    def spend(self, count: int) -> TimingSpend:
        """Where the timing's seconds went, its last `count` calls of the solution being the rounds' (the switches:
        thawing and freezing the candidate around each of its calls, those of the regime's decision and the warm-up
        too)."""
        rounds = self.seen[-count:] if count else []
        spent = {**self.spent, "switch_s": self.calls.switch_s, "arm_s": sum(o.arm for o in rounds),
                 "window_s": sum(o.window for o in rounds)}
        return TimingSpend(**{name: round(value, 4) for name, value in spent.items()})

    @contextmanager
    def _spending(self, name: str, rounds: bool = False) -> Iterator[None]:
        """The seconds of the block to `name`'s account; with `rounds`, to the warm-up's before the first round."""
        start = _perf_counter()
        try:
            yield
        finally:
            self.spent["warmup_s" if rounds and self.round < 0 else name] += _perf_counter() - start

    def eager(self) -> sampling.Sampled:
        with self._spending("eager_s", rounds=True):
            return self._eager()

    def _eager(self) -> sampling.Sampled:
        held: list[Any] = []
        inputs = self.inputs
        assert inputs is not None
        if self.primed:
            self.reference(*inputs)
            self.second = _copied(inputs, self.second)
            inputs = self.second
            timers.synchronize(self.job.device)
        timed, wall = self.timer.sample(lambda: held.append(self.reference(*inputs)))
        self.ref, self.eager_s = held[0], timed
        if self.round >= 0:
            self.times["eager"].append(timed)
        return sampling.Sampled(timed, wall, None, self.timer.last_issue, self.timer.regime)

    def solution(self) -> sampling.Sampled:
        witness_first = self.round % 2 == 1  # the witness's call before the solution's every other round
        if witness_first:
            self._witness()
        if self.primed:
            self.session.call()  # untimed, on the last round's inputs: this round's reach the buffers at release
        assert self.inputs is not None
        label = f"timed call {self.round + 1}" if self.round >= 0 else "a warm-up call"
        with self._spending("solution_s", rounds=True):
            seen = self.calls.sample(self.regime, self.inputs, self.ref, label)
            if seen.forced:  # the call waited for the GPU while issued: timed in the host regime from now on
                self.regime = Regime.HOST
                seen = self.calls.sample(Regime.HOST, self.inputs, self.ref, label)
        self.seen.append(seen)
        if self.round >= 0:
            self.times["solution"].append(seen.timed)
        if not witness_first:
            self._witness()
        self.rechecks.round_s = self.eager_s + seen.window
        return sampling.Sampled(seen.timed, seen.window, seen.done, seen.issue, seen.regime)

    def _witness(self) -> None:
        """The witness's timed call on this round's inputs, in the solution's regime (primed as the solution's is).
        A witness that fails is the harness's problem: it stops, and the reason is kept."""
        if self.witness is None or self.witness_failure or self.round < 0 or self.inputs is None:
            return
        try:
            with self._spending("witness_s"):
                if self.primed:
                    self.witness.session.call()
                seen = self.witness.sample(self.regime, self.inputs, self.ref, "the witness's call")
        except Exception as exc:  # noqa: BLE001 - the reference in a process of the judge's: not the solution's fault
            self.witness_failure = short(exc)
            return
        if not seen.forced:
            self.witnessed.append(seen)

    def check(self, index: int) -> None:
        start = _perf_counter()
        ok = comparison.surely_close(self.calls.outputs, self.ref, self.job.atol, self.job.rtol)
        if not ok:  # or it could not tell: the full comparison decides, and says why
            ok, fig = comparison.compare(self.calls.outputs, self.ref, self.job.atol, self.job.rtol)
        self.rechecks.cost_s = _perf_counter() - start
        self.check_s += self.rechecks.cost_s
        self.checked, self.count = index, self.count + 1
        if not ok:
            raise Verdict(Status.INCORRECT, f"timed call {index + 1}: {fig['message']} (its inputs were fresh, "
                                       "and the outputs of earlier calls were right)")


def _copied(values: list[Any], into: list[Any] | None) -> list[Any]:
    """values copied into `into`, the judge's second set of inputs (made on first use: a timing has one size)."""
    if into is None:
        return correctness.clone_inputs(values)
    for value, slot in zip(values, into):
        if isinstance(value, torch.Tensor):
            slot.copy_(value)
    return into
