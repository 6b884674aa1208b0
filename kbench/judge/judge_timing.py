"""The judge's timing of a solution (README "Timing protocol"): calibration, timed rounds, timer mismatch settlement."""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from typing import Any

import torch

from kbench.judge import comparison, correctness
from kbench.measure import timing
from kbench.system import escapes, machine
from kbench.judge.harness import guarded, make_timer, pin, timing_core
from kbench.judge.session import CandidateProcess, Session
from kbench.judge.verdicts import Verdict
from kbench.results.jobs import Judging
from kbench.results.records import TimingPolicy

_perf_counter = time.perf_counter

CALIBRATION_SAMPLES = (4, 24)  # at least, at most: the first are discarded (first-touch costs)
CALIBRATION_DISCARD = 2
CALIBRATION_S = 0.5  # no more calibration samples once this long has passed
RECHECK_ALL_NUMEL = 1 << 24  # outputs up to this many elements are checked after every timed call
RECHECK_SHARE = 0.25  # larger ones: five random calls among the first rounds, this share of the rest, and the last
RECHECK_FIRST = 5


def pin_timing_core(device: str, cand: CandidateProcess, judge: bool = False) -> None:
    """On CUDA the judge and its candidate issue their timed calls from one core (harness.timing_core)."""
    if device == "cuda":
        core = timing_core()
        if judge:
            pin(0, core)
        pin(cand.proc.pid, core)


def calibrate(job: Judging, session: Session, reference: Any, init: list[Any], make: Callable[[int], list[Any]],
              inputs: list[Any], outputs: Any) -> timing.Calibration:
    """Rounds of the timing protocol with the reference on both sides: the candidate's process still holds nothing
    but kbench and the reference, so each round trip's excess over the reported time is what the protocol costs for a
    call like this one, under this machine's conditions now (the judge's own samples interleaved, as in timing)."""
    session.start_calibration(job, reference, init, inputs, outputs)
    timer = make_timer(job.device)
    gaps: list[float] = []
    eager: list[float] = []
    issue: list[float] = []
    host_gaps: list[float] = []
    start = _perf_counter()
    low, high = CALIBRATION_SAMPLES
    while len(gaps) < high and (len(gaps) < low or _perf_counter() - start < CALIBRATION_S):
        values = make(job.seed - 1 - len(gaps))
        session.refill(values, sealed=seals(job.device))
        timing.settle(job.device)
        eager.append(timer.sample(lambda: reference(*values))[0])
        issue.append(timer.last_issue)
        sample = session.sample()
        gaps.append((sample.judge or 0.0) - sample.timed)
        host_gaps.append(sample.wall - sample.timed)
    keep = slice(CALIBRATION_DISCARD, None)
    return timing.Calibration(tuple(gaps[keep]), tuple(eager[keep]), tuple(host_gaps[keep]), tuple(issue[keep]))


def time_rounds(job: Judging, session: Session, reference: Any, make: Callable[[int], list[Any]],
                calibration: timing.Calibration) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[str]]:
    """Candidate and eager reference in alternating rounds: fresh inputs before each round, the candidate's outputs
    checked against the reference's on the same values after it (every round, or a random subset for big outputs).

    Primed rounds, for a launch-bound reference (its time is the host's, and a call right after a call of the same
    code in the same process ran several percent faster on the H100): each side's timed call follows an untimed call
    of its own and a copy of the round's inputs. The judge calls the reference on the fresh inputs, copies them into
    its own second set and times its call there; the candidate calls on the last round's inputs, the judge then
    writes the fresh ones into the shared buffers, and the candidate's call on them is timed. The fresh inputs reach
    the candidate only after its untimed call has returned and its process is frozen again."""
    device, policy = job.device, job.timing
    timer = make_timer(device)
    primed = primed_rounds(device, calibration)
    rng = random.Random(secrets.randbits(64))
    base = secrets.randbits(30)  # unpredictable seeds: no output can be computed ahead of its call
    cheap = sum(b.numel() for b in session.buffers[session.name] if b is not None) <= RECHECK_ALL_NUMEL
    forced = set(rng.sample(range(policy.min_samples), min(RECHECK_FIRST, policy.min_samples)))
    state: dict[str, Any] = {"inputs": None, "ref": None, "second": None, "checked": -2, "count": 0,
                             "refresh_s": 0.0, "check_s": 0.0}
    before, eager, solution, check = _round_steps(job, session, reference, make, timer, primed, base, state)

    def after(index: int) -> None:
        if cheap or index in forced or rng.random() < RECHECK_SHARE:
            check(index)

    (measured, escaped_s, escaped_n, window, gpu_holders), machine_figures, busy = machine.watched(
        lambda: _measure(session, device, policy, before, eager, solution, after), device, own_processes=2)
    if (escaped := escapes.escaped_warning(escaped_s, escaped_n, window, gpu_holders)) is not None:
        busy = [escaped, *busy]
    rounds = len(measured["solution"].samples)
    if state["checked"] != rounds - 1:
        check(rounds - 1)
    figures = {"rounds": rounds, "rechecked": state["count"], "recheck_every_call": cheap, "primed": primed,
               "refresh_s": round(state["refresh_s"], 4), "recheck_s": round(state["check_s"], 4),
               "calibration_p50_s": calibration.p50, "calibration_p90_s": calibration.p90}
    return measured, figures, machine_figures, busy


def _round_steps(job: Judging, session: Session, reference: Any, make: Callable[[int], list[Any]],
                 timer: Any, primed: bool, base: int, state: dict[str, Any]) -> tuple[Callable[..., Any], ...]:
    """The steps of one timed round (see `time_rounds`), sharing `state`: before it, the eager reference's sample,
    the candidate's sample, and the check of the candidate's outputs against the reference's."""
    device = job.device

    def refill() -> None:
        start = _perf_counter()
        session.refill(state["inputs"], sealed=seals(device))  # unsealed by the candidate inside its request
        timing.settle(device)
        state["refresh_s"] += _perf_counter() - start

    def before(index: int) -> None:
        start = _perf_counter()
        state["inputs"] = state["ref"] = None  # the last round's go before this round's are made
        state["inputs"] = make(base + index + 1)
        state["refresh_s"] += _perf_counter() - start
        if primed:
            timing.settle(device)
        else:
            refill()

    def eager() -> timing.Sampled:
        held: list[Any] = []
        inputs = state["inputs"]
        if primed:
            reference(*inputs)
            state["second"] = _copied(inputs, state["second"])
            inputs = state["second"]
            timing.synchronize(device)
        timed, wall = timer.sample(lambda: held.append(reference(*inputs)))
        state["ref"] = held[0]
        return timing.Sampled(timed, wall, None, timer.last_issue)

    def solution() -> timing.Sampled:
        if primed:
            session.sample()  # on the last round's inputs: this round's are not in the shared buffers yet
            refill()
        return session.sample()

    def check(index: int) -> None:
        start = _perf_counter()
        ok, fig = comparison.compare(session.outputs(), state["ref"], job.atol, job.rtol)
        state["check_s"] += _perf_counter() - start
        state["checked"], state["count"] = index, state["count"] + 1
        if not ok:
            raise Verdict("incorrect", f"timed call {index + 1}: {fig['message']} (its inputs were fresh, "
                                       "and the outputs of earlier calls were right)")

    return before, eager, solution, check


# Eager first in every round, as in calibration: the judge's sample follows its own input refresh and the
# candidate's follows the judge's sample. Alternating would put the judge's sample right after the candidate's
# call in every other round, which on the H100 made it bimodal (about 3% apart), so that its median wandered and
# sampling ran to --max-time.
def _measure(session: Session, device: str, policy: TimingPolicy, before: Callable[[int], None],
             eager: Callable[[], timing.Sampled], solution: Callable[[], timing.Sampled],
             after: Callable[[int], None]) -> tuple[dict[str, Any], float, int, float, int]:
    """The timed rounds, with the CPU time of the candidate's escaped processes over them and the window's length."""
    pid, group, own = session.cand.proc.pid, session.cand.pgid, escapes.own_helpers()
    start, tree = _perf_counter(), escapes.tree_cpu(pid, group, own=own)
    found = guarded(device, "timing", lambda: timing.measure_rounds(
        {"eager": eager, "solution": solution}, policy, before_round=before, after_round=after,
        alternate=False), judge_work="timing (the judge's inputs, reference calls and rechecks)")
    end = escapes.tree_cpu(pid, group, own=own)
    return (found, *escapes.escaped_cpu(tree, end), _perf_counter() - start, len(tree.gpu | end.gpu))


def timing_warnings(device: str, measured: dict[str, Any], calibration: timing.Calibration) -> list[str]:
    """What the timing's figures flag: a timer mismatch, and on CUDA escaped work and a disturbed reference."""
    found = [timing.timer_mismatch_warning(measured["solution"], calibration, cpu=device == "cpu")]
    if device == "cuda":  # on the CPU the freeze covers a disturbed reference, and the noise there is larger
        found += [timing.escaped_work_warning(measured["solution"], calibration.host_gap_p50),
                  timing.disturbed_warning(measured["eager"], calibration)]
    return [w for w in found if w is not None]


def settle_mismatch(found: list[str], solution: Any, device: str,
                    recalibrate: Callable[[], timing.Calibration | None]) -> tuple[list[str], dict[str, Any] | None]:
    """A `[timer_mismatch]` is checked once more against a calibration taken now (`recalibrate`): the protocol's own
    cost follows the host's speed, which on the H100 machine moved enough between calibration and timing to flag an
    honest solution (1 row in 4 runs). It stays only when the fresh calibration cannot explain the gap either. The
    figures of the fresh calibration, or None when there was nothing to settle."""
    if not any(w.startswith("[timer_mismatch]") for w in found):
        return found, None
    fresh = recalibrate()
    if fresh is None:
        return found, {"ran": False}
    again = timing.timer_mismatch_warning(solution, fresh, cpu=device == "cpu")
    kept = [w for w in found if not w.startswith("[timer_mismatch]")] + ([again] if again is not None else [])
    return kept, {"ran": True, "p50_s": fresh.p50, "p90_s": fresh.p90, "cleared": again is None}


def recalibrate(job: Judging, reference: Any, init: list[Any],
                make: Callable[[int], list[Any]]) -> timing.Calibration | None:
    """Calibration rounds now, with a fresh candidate process that holds nothing but the reference (spawned: this
    process has a CUDA context, so a fork could not use the GPU), pinned like the first. None if it cannot run."""
    device = job.device
    cand = CandidateProcess(init_cuda=device == "cuda")
    try:
        pin_timing_core(device, cand)
        inputs = make(job.seed)
        out = reference(*inputs)
        return calibrate(job, Session(cand, device), reference, init, make, inputs, out)
    except Exception:  # noqa: BLE001 - a harness check that could not run leaves the first verdict standing
        return None
    finally:
        cand.kill()


def seals(device: str) -> bool:
    """Whether timed rounds write their inputs sealed (kbench.judge.sealing): on a GPU, where work a frozen process queued
    keeps running. On the CPU a frozen process runs nothing (its escaped processes are counted: kbench.system.escapes), and
    drawing a key there costs about 2 ms per MB."""
    return device == "cuda"


def primed_rounds(device: str, calibration: timing.Calibration) -> bool:
    """Whether timing rounds are primed (see `time_rounds`): on a GPU, for a reference whose calls are launch-bound."""
    return device == "cuda" and calibration.reference_launch_bound


def _copied(values: list[Any], into: list[Any] | None) -> list[Any]:
    """values copied into `into`, the judge's second set of inputs (made on first use: a timing has one size)."""
    if into is None:
        return correctness.clone_inputs(values)
    for value, slot in zip(values, into):
        if isinstance(value, torch.Tensor):
            slot.copy_(value)
    return into
