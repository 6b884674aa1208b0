"""The judge's timing of a solution (docs/timing.md): calibration, the regime, timed rounds, the bound."""

from __future__ import annotations

import dataclasses
import random
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbench.config.run_config import TimingPolicy
from kbench.judge.candidate import protocol
from kbench.judge.candidate.session import CandidateProcess, Session
from kbench.judge.harness import guarded, make_timer
from kbench.judge.timing import checks, placement, sampling
from kbench.judge.timing.checks import Calibration
from kbench.judge.timing.rounds import SolutionRounds
from kbench.judge.timing.timed_call import Observed, TimedCalls
from kbench.judge.timing.timers import Timer
from kbench.results.diagnostics import Divisor, MachineState, PlacementFigures, TimingProtocol, WitnessFigures
from kbench.results.findings import Finding
from kbench.results.records import Measurement, Regime
from kbench.results.stats import median
from kbench.system import escapes, machine
from kbench.system.cores import pin, timing_core
from kbench.wire.jobs import Judging

_perf_counter = time.perf_counter

# Per regime: the least calls a calibration is made of (a witness's rounds, `witnessed_calibration`), and the most a
# calibration takes (the first CALIBRATION_DISCARD are dropped); it takes what fits in CALIBRATION_S, at least
# CALIBRATION_LEAST. Calibration was half of an honest evaluation's 2.9 s on the H100 at (10, 60) rounds within 1 s;
# what its medians resolve is bounded by how much the protocol's cost differs between candidate processes (tens of
# microseconds, docs/timing.md), which more rounds in one process do not narrow.
CALIBRATION_ROUNDS = (10, 30)
CALIBRATION_DISCARD = 2
CALIBRATION_WARMUP = 2  # untimed calls of the reference in the candidate's process before the calibration's rounds
CALIBRATION_S = 0.3  # no more calibration rounds once this long has passed
# Past CALIBRATION_S calibration stops once it has this many per regime: what the process check needs (its least
# samples, kept after the discard). A 10 ms call's bound is 5% of it (0.5 ms), far above the protocol's spread of
# tens of microseconds; at 10 rounds per regime its calibration took 0.9 s of the row on the H100 (a 47 ms call's
# 2.5 s).
CALIBRATION_LEAST = checks.PROCESS_MIN_SAMPLES + CALIBRATION_DISCARD


def pin_timing_core(device: str, cand: CandidateProcess, judge: bool = False) -> None:
    """On CUDA the judge and its candidate issue their timed calls from one core (system.cores.timing_core)."""
    if device == "cuda":
        core = timing_core()
        if judge:
            pin(0, core)
        pin(cand.pid, core)


def calibrate(job: Judging, session: Session, reference: Any, init: list[Any], make: Callable[[int], list[Any]],
              inputs: list[Any], outputs: Any,
              before_rounds: Callable[[Session], None] = lambda session: None) -> Calibration:
    """Rounds of the timing protocol with the reference on both sides, in each regime (only the host's on the CPU):
    the candidate's process still holds nothing but kbench and the reference, so each call's excess of the judge's
    window over the reported time is what the protocol costs for a call like this one, on this machine now. The
    judge's eager samples are interleaved, as in timing; its timer decides the reference's own regime first.
    `before_rounds(session)` is called once the candidate's start is over (the reference built, its first calls),
    before anything is timed: the judge waits there for its turn on the GPU (judge.judge_solution)."""
    session.start_calibration(job, reference, init, inputs, outputs)
    for _ in range(CALIBRATION_WARMUP):  # first calls initialise libraries, which waits for the GPU: not behind a gate
        session.call()
    before_rounds(session)
    timer = make_timer(job.device)
    eager_regime = timer.decide(lambda: reference(*inputs))
    modes = list(Regime) if job.device == "cuda" else [Regime.HOST]  # the CPU has the host's clock only
    return _beside(job, session, reference, make, timer, eager_regime, modes, job.seed - 1, "a calibration call")


def _beside(job: Judging, session: Session, reference: Any, make: Callable[[int], list[Any]], timer: Timer,
            eager_regime: Regime, modes: list[Regime], seed: int, label: str,
            rounds: tuple[int, int] = (CALIBRATION_LEAST, CALIBRATION_ROUNDS[1]),
            seconds: float = CALIBRATION_S, placed: bool = False, forced_limit: int = 0) -> Calibration:
    """Rounds of the reference bound in the candidate's process, through the protocol in `modes` by turns, each after
    the judge's own eager call on the same fresh inputs (`timer`, in `eager_regime`): at least `rounds[0]` per mode,
    more while `seconds` have not passed (or, `placed`, until each side kept enough), at most `rounds[1]`; the first
    CALIBRATION_DISCARD dropped. A mode whose call waits for the GPU while issued is dropped (no GPU regime on this
    problem), or, with `forced_limit` (a check in one regime, `after`), such a round is left out (its eager sample too)
    and counted (`Calibration.forced`), and the rounds stop after `forced_limit` of them: what they measured is what
    the check has. With `placed` (one mode), both sides' memory is drawn anew every placement.GROUP_ROUNDS rounds
    (placement.MemoryDraw.both) and each side keeps its fastest draws (placement.fastest_groups) instead of dropping
    the first rounds."""
    calls = TimedCalls(session, job.atol, job.rtol)
    draw, rng = placement.MemoryDraw(job.device), random.Random(secrets.randbits(64))
    seen: dict[Regime, list[Observed]] = {m: [] for m in modes}
    eager: list[float] = []
    issue: list[float] = []
    least, most = rounds
    start, index, forced = _perf_counter(), 0, 0
    try:
        while not all(len(seen[m]) >= most for m in modes) and (not forced_limit or forced < forced_limit) and (
                _perf_counter() - start < seconds or any(len(seen[m]) < least for m in modes)
                or (placed and bool(modes) and not placement.kept_enough(eager, [o.timed for o in seen[modes[0]]]))):
            values = make(seed - index - forced)
            if placed and index % placement.GROUP_ROUNDS == 0:
                draw.both(calls, rng, lambda: reference(*values))  # noqa: B023 - called at once
            sampling.settle(job.device)
            held: list[Any] = []
            eager.append(timer.sample(lambda: held.append(reference(*values)))[0])  # noqa: B023 - called at once
            issue.append(timer.last_issue)
            mode = modes[index % len(modes)]
            observed = calls.sample(mode, values, held[0], label)
            if observed.forced and forced_limit:  # this round is left out: the next takes its place
                eager.pop()
                issue.pop()
                forced += 1
                continue
            seen[mode].append(observed)
            if observed.forced:  # the reference waits for the GPU while issued
                modes.remove(mode)
                seen[mode] = []
            index += 1
    finally:
        calls.close()
        draw.close()
    if placed and len(modes) == 1 and len(seen[modes[0]]) == len(eager):
        mine, theirs = placement.fastest_groups(eager), placement.fastest_groups([o.timed for o in seen[modes[0]]])
        found = observed_calibration({modes[0]: [seen[modes[0]][i] for i in theirs]}, [eager[i] for i in mine],
                                     [issue[i] for i in mine], eager_regime)
    else:
        keep = slice(CALIBRATION_DISCARD, None)
        kept = {regime: [o for o in calls[keep] if not o.forced] for regime, calls in seen.items()}
        found = observed_calibration(kept, eager[keep], issue[keep], eager_regime)
    return dataclasses.replace(found, forced=forced) if forced else found


# A row whose reference allocates this much in a call has the reference kept in the candidate's process and timed
# there again after the solution's rounds (`after`). On one H200 the same cuDNN kernel of a call with a 212 MB
# intermediate (KernelBench level 2's #77) ran in 4.9 or 6.4 ms in one process depending only on which memory the
# caching allocator had given it (docs/benchmarks.md, 2026-11-28): the solution's calls and the judge's eager are each
# one draw of that, which the check before the import cannot see.
AFTER_MIN_BYTES = 32 << 20
AFTER_ROUNDS = 12  # rounds of the check after the solution's (the first CALIBRATION_DISCARD dropped)
# ... where both sides draw their memory anew every few rounds (timing.placement): as many draws as the solution's
# rounds take at least, and more (three times as many at most) until each side kept placement.KEPT_LEAST samples
AFTER_PLACED_ROUNDS = placement.GROUPS * placement.GROUP_ROUNDS
# Calls of the check that wait for the GPU while issued are left out, and the check stops at this many: on one H200 a
# check whose first such call ended it at once left #77's honest copy `correct` at 0.77x (docs/benchmarks.md,
# 2026-11-28, thirty-first session)
AFTER_FORCED = 3


def after(job: Judging, session: Session, reference: Any, make: Callable[[int], list[Any]],
          placed: bool = False) -> Calibration:
    """After the solution's rounds, in the GPU regime (the host's on the CPU): the reference kept in the candidate's
    process (built there before the solution was imported, protocol.Calibrate.keep) timed through the protocol beside
    the judge's eager, AFTER_ROUNDS rounds. Its calls allocate what an honest copy's calls allocated, and the caching
    allocator hands them the blocks those calls freed: the same memory the solution's calls ran on, where the judge's
    eager runs on its own. The rounds are a calibration's (`_beside`), in that one regime: its `eager` and `reference`
    are what `checks.processes_disagree` compares. With `placed` (the solution's rounds found a side's speed moving
    with its memory, timing.placement), both sides draw their memory as those rounds did."""
    values = make(job.seed - 2000)
    session.bind(protocol.REFERENCE, values, reference(*values))
    peak = session.peak_bytes  # the solution's: the reference's calls here are not its
    for _ in range(CALIBRATION_WARMUP):
        session.call()
    session.peak_bytes = peak
    regime = Regime.GPU if job.device == "cuda" else Regime.HOST  # the CPU has the host's clock only
    timer = make_timer(job.device)
    timer.use(regime)
    counts = (AFTER_PLACED_ROUNDS, 3 * AFTER_PLACED_ROUNDS) if placed else (AFTER_ROUNDS, AFTER_ROUNDS)
    return _beside(job, session, reference, make, timer, regime, [regime], job.seed - 2001,
                   "a call of the reference after the solution's", counts, 0.0, placed=placed,
                   forced_limit=AFTER_FORCED)


def observed_calibration(seen: Mapping[Regime, Sequence[Observed]], eager: Sequence[float] = (),
                         eager_issue: Sequence[float] = (), eager_regime: Regime | None = None) -> Calibration:
    """A calibration from the reference's timed calls through the protocol, by regime: the judge's window up to the
    signal less the reported time, the Arm request less the issue time (gated calls), and the time from the signal to
    the outputs verified; with the judge's own eager samples and their regime, and the candidate's reported times of
    the reference in that regime."""
    gated = seen.get(Regime.GPU, ())  # calls issued at the Arm request, behind the gate
    overheads = {regime: tuple(o.done - o.timed for o in calls) for regime, calls in seen.items() if calls}
    return Calibration(
        overheads=overheads, eager=tuple(eager), eager_issue=tuple(eager_issue),
        arm_overhead=tuple(o.arm - o.issue for o in gated), eager_regime=eager_regime,
        verify=tuple(o.verify for calls in seen.values() for o in calls),
        reference=tuple(o.timed for o in seen.get(eager_regime or Regime.HOST, ())),
        bracket=tuple(o.bracket - o.timed for o in gated if o.bracket is not None))


@dataclass(frozen=True)
class TimedRounds:
    """What a solution's timed rounds measured."""

    solution: Measurement  # the candidate's reported times, with the judge's window over each call
    eager: Measurement  # the eager reference, timed by the judge in the same rounds
    protocol: TimingProtocol  # the protocol's figures (run.json's diagnostics.protocol)
    machine: MachineState  # what the machine did meanwhile (kbench.system.machine.watched)
    findings: list[Finding]  # about the machine and the solution's escaped processes while it was timed
    witness: Calibration | None = None  # what the protocol cost the witness in these rounds (`witnessed`)
    # The reference as the witness reported it in these rounds, when the speedup divides by it (`divided_by_witness`)
    divisor: Measurement | None = None


@dataclass(frozen=True)
class _Window:
    """The timed rounds, with the CPU time the candidate's escaped processes took over them."""

    measured: dict[str, Measurement]  # "eager" and "solution"
    escaped_s: float
    escaped_processes: int
    seconds: float
    gpu_holders: int  # escaped processes with a GPU device open


def time_rounds(job: Judging, session: Session, reference: Any, make: Callable[[int], list[Any]],
                calibration: Calibration, witness: Session | None = None, host_only: bool = False,
                divide: bool = False) -> TimedRounds:
    """Candidate and eager reference in rounds: fresh inputs before each round (they reach the candidate at the
    release of its timed call), the candidate's outputs checked against the reference's on the same values after it
    (every round, or a random subset for big outputs).

    Primed rounds, for a launch-bound reference (its time is the host's, and a call right after a call of the same
    code in the same process ran several percent faster on the H100): each side's timed call follows an untimed call
    of its own. The judge calls the reference on the fresh inputs, copies them into its own second set and times its
    call there; the candidate calls on the last round's inputs, and this round's reach it at the release.

    With a `witness` (a process of the judge's holding only the reference, `start_witness`), every round also times
    the witness's call on the same inputs, before or after the solution's in turn: the rounds then carry their own
    calibration (`TimedRounds.witness`), and with `divide` the reference's time as the witness reported it, which
    the speedup divides by in the host regime (`divided_by_witness`). With `host_only`, the solution is timed in the
    host regime, undecided."""
    device, policy = job.device, job.timing
    rounds = SolutionRounds(job, session, reference, make, calibration, witness, host_only)
    try:
        regime = guarded(device, "timing", rounds.decide, judge_work="deciding the solution's regime")

        def after(index: int) -> None:
            if rounds.rechecks.wanted(index):
                rounds.check(index)

        witnesses = (witness.cand.pid,) if witness is not None else ()  # the judge's own: neither escaped nor busy
        window, machine_state, busy = machine.watched(
            lambda: _measure(session, device, rounds.stopping_rule(policy), rounds, after, witnesses), device,
            own_processes=2 + len(witnesses))
        escaped = escapes.escaped_warning(window.escaped_s, window.escaped_processes, window.seconds,
                                          window.gpu_holders)
        if escaped is not None:
            busy = [escaped, *busy]
        measured = window.measured
        count = len(measured["solution"].samples)
        if rounds.checked != count - 1:
            rounds.check(count - 1)
    finally:
        rounds.calls.close()
        rounds.draw.close()
        if rounds.witness is not None:
            rounds.witness.close()
    placements = None
    if rounds.placed:  # each side's headline: its fastest draws of memory (timing.placement)
        measured, placements = _fastest_draws(measured, rounds.draws)
    protocol = TimingProtocol(
        rounds=count, rechecked=rounds.count, recheck_every_call=rounds.rechecks.every_call, primed=rounds.primed,
        regime=regime, regime_decision=rounds.decision, eager_regime=rounds.timer.regime,
        refresh_s=round(rounds.refresh_s, 4), recheck_s=round(rounds.check_s, 4),
        calibration_p50_s=median(calibration.excess(regime)) if calibration.excess(regime) else None,
        placements=placements, spent=rounds.spend(count))
    if rounds.seen:
        protocol = dataclasses.replace(
            protocol, verify_s=tuple(round(o.verify, 7) for o in rounds.seen[-count:]),
            calibration_verify_p50_s=median(calibration.verify) if calibration.verify else None,
            bracket_excess_s=tuple(round(o.bracket - o.timed, 7) for o in rounds.seen[-count:]
                                   if o.bracket is not None),
            calibration_bracket_p50_s=median(calibration.bracket) if calibration.bracket else None)
    if regime == Regime.GPU and rounds.seen:
        issue, gpu = rounds.judged(rounds.seen)
        protocol = dataclasses.replace(protocol, judged_issue_s=issue, judged_gpu_s=gpu)
    witnessed = None
    if rounds.witness is not None:
        witnessed = witnessed_calibration(rounds.witnessed, calibration)
        base = witnessed.excess(regime) if witnessed is not None else ()
        protocol = dataclasses.replace(protocol, witness=WitnessFigures(
            rounds=len(rounds.witnessed), failure=rounds.witness_failure or None, p50_s=median(base) if base else None,
            verify_p50_s=median(witnessed.verify) if witnessed and witnessed.verify else None,
            # the reference's own reported time in a candidate process, beside the solution's
            timed_p50_s=median([o.timed for o in rounds.witnessed]) if rounds.witnessed else None))
    divisor = (divided_by_witness(rounds.witnessed, calibration, measured["eager"], measured["solution"].regime)
               if divide else None)
    if divisor is not None:
        protocol = dataclasses.replace(protocol, divisor=Divisor(
            by="witness", calls=len(divisor.samples), witness_p50_s=divisor.median,
            judge_eager_p50_s=measured["eager"].median))
    return TimedRounds(measured["solution"], measured["eager"], protocol, machine_state, busy, witnessed, divisor)


def _fastest_draws(measured: dict[str, Measurement], draws: int) -> tuple[dict[str, Measurement], PlacementFigures]:
    """Each side's samples on its fastest draws of memory (placement.fastest_groups), and what the draws did."""
    solution, eager = measured["solution"], measured["eager"]
    keep_solution = placement.fastest_groups(solution.samples)
    keep_eager = placement.fastest_groups(eager.samples)
    found = placement.figures(solution.samples, eager.samples, keep_solution, keep_eager, draws)
    return ({"solution": placement.kept_only(solution, keep_solution),
             "eager": placement.kept_only(eager, keep_eager)}, found)


def divided_by_witness(seen: Sequence[Observed], calibration: Calibration, eager: Measurement,
                       regime: str = Regime.HOST) -> Measurement | None:
    """The reference's time in a candidate's kind of process, for a reference the judge times in the host regime:
    the witness's calls of the rounds (trusted: kbench's own process, holding only the reference), timed through the
    same protocol as the solution's, in the same regime (`regime`, the solution's) and rounds. A launch-bound call's
    time is the host's, and the judge's process issued the same call 2-4% slower than candidate processes did on the
    H100 (an honest copy read 1.02-1.04x of the judge's eager, and 0.96-0.99x in calibration before the solution was
    imported), so its eager is not the one to divide by; in the GPU regime it is (processes agree there,
    `processes_disagree` checks it). A solution timed in the GPU regime beside a reference the judge timed in the
    host regime (its regime misjudged on a busy host, or the solution no longer launch-bound) divides by the witness's
    calls in the GPU regime: a host-regime time over a GPU-regime one read 1.08x for an honest copy of a 1.47 ms call
    on the H100 (2026-11-27). None when the judge's eager is in the GPU regime, or the witness gave fewer calls in
    `regime` than a calibration's least."""
    calls = [o for o in seen if o.regime == regime]
    if calibration.eager_regime != Regime.HOST or len(calls) < CALIBRATION_ROUNDS[0]:
        return None
    return Measurement(tuple(o.timed for o in calls), tuple(o.window for o in calls), eager.stop_reason,
                       tuple(o.done for o in calls), tuple(o.issue for o in calls), regime)


def witnessed_calibration(seen: Sequence[Observed], base: Calibration) -> Calibration | None:
    """The witness's calls of the timed rounds as a calibration (`observed_calibration`, by the regime of each call);
    the judge's eager figures stay `base`'s. None with fewer calls than a calibration's least (CALIBRATION_ROUNDS)."""
    if len(seen) < CALIBRATION_ROUNDS[0]:
        return None
    by_regime = {regime: [o for o in seen if o.regime == regime] for regime in Regime}
    # `reference` pairs the candidate's calls with the judge's eager of the same rounds: base's eager is not of these
    return dataclasses.replace(observed_calibration(by_regime, base.eager, base.eager_issue, base.eager_regime),
                               reference=())


# Eager first in every round, as in calibration: the judge's sample follows its own input refresh and the
# candidate's follows the judge's sample. Alternating would put the judge's sample right after the candidate's
# call in every other round, which on the H100 made it bimodal (about 3% apart), so that its median wandered and
# sampling ran to --max-time.
def _measure(session: Session, device: str, policy: TimingPolicy, rounds: SolutionRounds,
             after: Callable[[int], None], witnesses: Sequence[int] = ()) -> _Window:
    """The timed rounds, with the CPU time of the candidate's escaped processes over them and the window's length
    (`witnesses`: the judge's witness processes, children of the judge that are not the solution's)."""
    pid, group = session.cand.pid, session.cand.pgid
    own = escapes.own_helpers() | set(witnesses) | session.reserve.pids()
    start, tree = _perf_counter(), escapes.tree_cpu(pid, group, own=own)
    found = guarded(device, "timing", lambda: sampling.measure_rounds(
        {"eager": rounds.eager, "solution": rounds.solution}, policy, before_round=rounds.before,
        after_round=after, alternate=False, kept=rounds.kept(), more=rounds.more, stuck=rounds.stuck),
        judge_work="timing (the judge's inputs, reference calls and rechecks)")
    end = escapes.tree_cpu(pid, group, own=own)
    return _Window(found, *escapes.escaped_cpu(tree, end), _perf_counter() - start, len(tree.gpu | end.gpu))


def start_witness(job: Judging, session: Session, reference: Any, init: list[Any],
                  make: Callable[[int], list[Any]]) -> Session | None:
    """A witness for timed rounds (`time_rounds`): a fresh candidate process that holds only the reference, under the
    solution's sandbox plan, pinned like the solution's and warmed up as calibration is (the worker's reserve, forked
    before this process had a CUDA context, else spawned: a fork now could not use the GPU). None if it cannot start;
    the caller kills `.cand`."""
    device = job.device
    cand = session.reserve.take(init_cuda=device == "cuda")
    try:
        pin_timing_core(device, cand)
        witness = Session(cand, device)
        witness.sandbox_plan = session.sandbox_plan
        inputs = make(job.seed)
        witness.start_calibration(job, reference, init, inputs, reference(*inputs))
        for _ in range(CALIBRATION_WARMUP):
            witness.call()
        return witness
    except Exception:  # noqa: BLE001 - a harness check that could not run leaves the first timing's rule standing
        cand.kill()
        return None


def time_beside_witness(job: Judging, session: Session, reference: Any, init: list[Any],
                        make: Callable[[int], list[Any]], calibration: Calibration,
                        host_only: bool = False) -> TimedRounds:
    """The rounds timed beside a witness (`start_witness`; without one, against the calibration as before, and the
    figures say why): after a first flag, and from the start for a reference the judge times in the host regime on
    CUDA, whose speedup divides by the witness's time (`divided_by_witness`); in the host regime with `host_only`
    (after a `[regime_changed]`, kbench.judge.timing.flags.host_only_again)."""
    witness = start_witness(job, session, reference, init, make)
    try:
        timed = time_rounds(job, session, reference, make, calibration, witness, host_only, divide=True)
    finally:
        if witness is not None:
            witness.cand.kill()
    if witness is None:
        failed = WitnessFigures(rounds=0, failure="the witness process could not start")
        timed = dataclasses.replace(timed, protocol=dataclasses.replace(timed.protocol, witness=failed))
    return timed
