"""The judge: one evaluation of a solution, decided in a process that never imports it.

The judge builds the reference, makes every input, keeps the reference's outputs and runs every comparison, the
float64 oracle and the timing (kbench.judge.timing.judge_timing). The solution lives in a candidate process it spawns
(kbench.judge.candidate.candidate) and speaks to through kbench.judge.candidate.protocol. See docs/judge.md for the
protocol and what each step defends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from kbench.judge.candidate import protocol
from kbench.judge.candidate.loading import load_failure
from kbench.judge.candidate.session import Announce, CandidateProcess, Reserve, Session
from kbench.judge.checks import correctness, kernel_names, trust
from kbench.judge.draft import Draft
from kbench.judge.harness import (
    Phases,
    apply_math_flags,
    guarded,
    job_reference,
    load_problem,
    set_sizes,
    timed_findings,
    with_peak,
)
from kbench.judge.timing import checks, placement, timers
from kbench.judge.timing.checks import Calibration
from kbench.judge.timing.flags import host_only_again, mismatch_check, retime_mismatch
from kbench.judge.timing.judge_timing import (
    AFTER_MIN_BYTES,
    TimedRounds,
    after,
    calibrate,
    pin_timing_core,
    time_beside_witness,
    time_rounds,
)
from kbench.judge.verdict import Verdict, decide
from kbench.results.diagnostics import Diagnostics, ProcessCheck
from kbench.results.figures import PeakMemory
from kbench.results.findings import Finding, FindingCode
from kbench.results.records import Evaluation, Measurement, Regime, Speedups, Status
from kbench.system import escapes, sandbox
from kbench.wire.jobs import EvaluateJob

TIMING_CLOCKS = ("torch.cuda.Event", "torch.cuda.synchronize", "torch.cuda.Event.elapsed_time", "time.perf_counter",
                 "time.time", "time.monotonic")


def judge_solution(job: EvaluateJob, env: dict[str, str], announce: Announce,
                   cand: CandidateProcess | None = None, wait_turn: Callable[[], None] = lambda: None,
                   reserve: Reserve | None = None) -> Evaluation:
    """The worker's `evaluate` mode: this process is the solution's judge; the solution runs in a candidate it spawned
    (ahead of the job, when the worker was started ahead) and imports it with the job's `env`.

    Args:
        job: the problem at its size, the solution's file, the seed, tolerances, trials and timing policy.
        env: the environment the solution is imported with (its build folder, the kernel DSLs' caches).
        announce: called with each phase reached ("timed": the parent may start the next child).
        cand: the candidate process, when it was started ahead of the job.
        wait_turn: returns once this job may time on its GPU (the slot's previous job has ended: the worker's stdin
            ends, kbench.execution.pool.Turn); what comes before it times nothing and runs only kbench's and the
            reference's code (the judge's set-up, the candidate's reference built and called).
        reserve: the candidate processes for later needs (a witness, a fresh candidate), one forked ahead by the
            worker when it could (kbench.judge.candidate.session.Reserve).

    Returns:
        The row (kbench.results.records.Evaluation): its verdict, its trials, the timing (seconds), the findings and
        the figures; the parent adds what was evaluated and where.

    Raises:
        Verdict: an ending decided early (load_error, runtime_error, crashed, timeout, not_run), with its message.
    """
    apply_math_flags(job.math)
    torch.set_grad_enabled(False)
    escapes.become_subreaper()  # before any of the solution's code runs: its orphans stay in view (system.escapes)
    cand = cand or CandidateProcess()
    cand.announce(announce)
    started = [cand]  # every candidate process of the evaluation (a fresh one replaces one that disagreed)
    reserve = reserve or Reserve()
    try:
        return _steps(job, env, Session(cand, job.device, reserve), announce, started, wait_turn)
    finally:
        reserve.close()
        for each in started:
            each.kill()
            escapes.kill_escaped(each.pid, each.pgid)


def _steps(job: EvaluateJob, env: dict[str, str], session: Session, announce: Announce,
           started: list[CandidateProcess], wait_turn: Callable[[], None]) -> Evaluation:
    """Each step in its order; `draft` holds what they found until the verdict closes it."""
    device, seed = job.device, job.seed
    phases = Phases()
    problem = load_problem(job.problem)
    reference, init, make = job_reference(problem, job)
    probe_inputs = make(seed)
    probe, ref_peak = guarded(device, "the reference", partial(with_peak, device, partial(reference, *probe_inputs)),
                              judge_work="the reference's first call")
    phases.mark("setup")
    session.sandbox_plan = sandbox.plan_for(job.solution.path, env, device)  # in force before the solution is imported
    # A call this big: both sides' memory is drawn anew every few rounds (kbench.judge.timing.placement), and the
    # reference is timed again in the candidate's process after the solution's rounds (judge_timing.after)
    big = session.big_call = device in AFTER_CHECKED and (ref_peak is None or ref_peak >= AFTER_MIN_BYTES)

    def before_rounds(current: Session) -> None:  # the candidate's start is over; from here on things are timed
        phases.mark("calibration_start")
        wait_turn()
        phases.mark("waiting")
        pin_timing_core(job.device, current.cand, judge=True)

    calibrate_in = partial(calibrate, job, reference=reference, init=init, make=make, inputs=probe_inputs,
                           outputs=probe, before_rounds=before_rounds)
    session, calibration, processes, disagree = _calibrated(
        job, session, lambda current: _fresh_session(job, current, announce, started), calibrate_in, big)
    phases.mark("calibration")
    copied = _loaded(job, env, session, reference, init, probe_inputs, probe, phases)
    del probe, probe_inputs
    _free_cached(device)
    draft = Draft(Evaluation(diagnostics=Diagnostics(state_dict_tensors_copied=copied, sandbox=session.sandbox,
                                                     processes=processes)), phases.seconds)
    if disagree is not None:
        draft.warnings.append(disagree)
    phases.mark("build")
    trials, warnings = _trials(job, session, reference, make, [seed + 1 + i for i in range(job.trials)])
    draft.row = dataclasses.replace(draft.row, trials=tuple(trials))
    draft.warnings += warnings
    phases.mark("trials")
    if not all(t.passed for t in trials):
        _finish(session, draft)
        return _decided(job, draft, Status.INCORRECT, trials[-1].message)
    failure = _other_sizes(job, problem, session, draft)
    set_sizes(problem, job.problem.overrides)
    session.bind("main", make(seed))
    phases.mark("other_sizes")
    if failure:
        _finish(session, draft)
        return _decided(job, draft, Status.INCORRECT, failure)
    timing = _timed(job, session, reference, init, make, calibration)
    retried = 0
    while timing.after is not None and timing.after.unsettled and disagree is None and retried < AFTER_RETRIES:
        # The solution's calls and the judge's eager ran on memory of different speeds (or the check could not tell):
        # time it all again in a fresh candidate process, whose memory is a new draw (its trials stand: the rounds
        # check every output again)
        retried += 1
        session = _fresh_session(job, session, announce, started)
        probe_inputs = make(seed)
        probe = reference(*probe_inputs)
        session, calibration, again, disagree = _calibrated(
            job, session, lambda current: _fresh_session(job, current, announce, started),
            partial(calibrate_in, inputs=probe_inputs, outputs=probe), big)
        processes = dataclasses.replace(again, ratios=processes.ratios + again.ratios,
                                        fresh_candidates=processes.fresh_candidates + again.fresh_candidates + 1)
        if disagree is not None:  # the fresh process disagrees before the import: the row is `suspect` for that
            draft.warnings.append(disagree)
        _loaded(job, env, session, reference, init, probe_inputs, probe, phases)
        del probe, probe_inputs
        session.bind("main", make(seed))
        timing = _timed(job, session, reference, init, make, calibration)
    if timing.after is not None:
        processes = dataclasses.replace(processes, after=timing.after.ratio, after_disagrees=timing.after.disagrees,
                                        after_unmeasured=timing.after.unmeasured,
                                        after_retries=retried)
    timed = timing.rounds
    protocol = dataclasses.replace(timed.protocol, retimed=timing.first.text) if timing.first else timed.protocol
    diagnostics = dataclasses.replace(draft.row.diagnostics, protocol=protocol, machine=timed.machine,
                                      processes=processes)
    draft.row = dataclasses.replace(draft.row, timing=timed.solution, eager_timing=timed.divisor or timed.eager,
                                    diagnostics=diagnostics)
    draft.warnings += timing.findings
    phases.mark("timing")
    announce("timed")  # the parent may now start the next child (kbench.execution.warm_starts.WarmStarts)
    _trust(job, session, reference, make, draft, phases)
    draft.row = dataclasses.replace(draft.row, peak=PeakMemory(solution=session.peak_bytes, reference=ref_peak))
    if (warning := memory_warning(session.peak_bytes, ref_peak)) is not None:
        draft.warnings.append(warning)
    return _decided(job, draft, Status.CORRECT)


def _loaded(job: EvaluateJob, env: dict[str, str], session: Session, reference: Any, init: list[Any],
            inputs: list[Any], outputs: Any, phases: Phases) -> int:
    """The solution imported into the session's candidate, its model built (the reference's weights copied: their
    count) and bound to `inputs`, with output buffers shaped like `outputs`."""
    try:
        session.load(job.solution.path, env)
    except Verdict as v:
        raise load_failure(v) from None  # a kernel DSL missing here: not_run, as the machine cannot run it
    phases.mark("load")
    copied = session.build("main", reference, init, job.seed)
    session.bind("main", inputs, outputs)
    return copied


@dataclass(frozen=True)
class AfterCheck:
    """The check after the solution's rounds (`_after`): the candidate process's time of the kept reference over the
    judge's eager, and what it found: `[processes_disagree]` (`disagrees`), `[processes_unchecked]` (`unmeasured`: the
    check timed too few calls to compare), or `[check_skipped]`."""

    ratio: float | None = None
    finding: Finding | None = None

    @property
    def disagrees(self) -> bool:
        return self.finding is not None and self.finding.code == FindingCode.PROCESSES_DISAGREE

    @property
    def unmeasured(self) -> bool:
        return self.finding is not None and self.finding.code == FindingCode.PROCESSES_UNCHECKED

    @property
    def unsettled(self) -> bool:
        """Whether the solution is timed again in a fresh candidate process (`AFTER_RETRIES`): the processes were
        apart, or the check could not tell."""
        return self.disagrees or self.unmeasured


@dataclass(frozen=True)
class Timing:
    """A solution's rounds as `_timed` took them: the rounds, their findings, the first timing's flag when they were
    timed again, and the check after them (None where it does not run)."""

    rounds: TimedRounds
    findings: tuple[Finding, ...]
    first: Finding | None
    after: AfterCheck | None


def _timed(job: EvaluateJob, session: Session, reference: Any, init: list[Any], make: Callable[[int], list[Any]],
           calibration: Calibration) -> Timing:
    """The solution's timed rounds (beside a witness for a reference the judge times in the host regime, whose
    speedup divides by it; timed again after a first flag: flags.retime_mismatch), and for a big GPU-regime call the
    reference timed again in the candidate's process after them (`_after`), or, where a side of the rounds was stuck at
    the other's slow memory (placement.stuck), that finding instead (the solution is then timed again in a fresh
    process, as after a disagreement: `_steps`)."""
    device = job.device
    beside_witness = device == "cuda" and calibration.reference_launch_bound  # its speedup divides by the witness
    timed, found, first = retime_mismatch(
        (lambda: time_beside_witness(job, session, reference, init, make, calibration)) if beside_witness else
        (lambda: time_rounds(job, session, reference, make, calibration)),
        lambda found: time_beside_witness(job, session, reference, init, make, calibration, host_only_again(found)),
        mismatch_check(device, calibration))
    findings = found + timed.findings + [w for w in (checks.level_moved_warning(timed.solution, "the solution"),
                                                     checks.level_moved_warning(timed.eager, "the eager reference"))
                                         if w is not None]
    checked = session.big_call and (
        device != "cuda" or timed.solution.regime == calibration.eager_regime == Regime.GPU)
    drawn = timed.protocol.placements
    moved = placement.drew_on(drawn)  # a side's speed moved with its memory
    if checked and drawn is not None and drawn.stuck and job.device in PROCESS_CHECKED:
        check: AfterCheck | None = AfterCheck(finding=checks.stuck_warning(drawn))  # timed again, as when apart
    else:
        check = _after(job, session, reference, make, timed.eager if moved else None) if checked else None
    if check is not None and check.finding is not None:
        findings.append(check.finding)
    return Timing(timed, tuple(findings), first, check)


def _after(job: EvaluateJob, session: Session, reference: Any, make: Callable[[int], list[Any]],
           drawn: Measurement | None = None) -> AfterCheck:
    """The reference kept in the candidate's process, timed there after the solution's rounds beside the judge's eager
    (judge_timing.after): `[processes_disagree]` when the two disagree, as before the import. With `drawn`, the judge's
    eager of the solution's rounds where those rounds found a side's speed moving with its memory: the check draws
    memory as they did, and its eager must agree with `drawn` too (checks.draws_disagree). The solution's model is
    bound again for the checks that follow. What the candidate's process does wrong meanwhile is its verdict, as
    anywhere; a failure of the judge's own side (out of memory, say) skips the check with `[check_skipped]`."""
    try:
        found = after(job, session, reference, make, drawn is not None)
    except Verdict:
        raise
    except Exception as exc:  # noqa: BLE001 - the judge's own check: the row stands without it
        skipped = trust.skipped("the reference's timing after the solution's rounds", exc)
        session.bind("main", make(job.seed))
        return AfterCheck(finding=skipped)
    ratio = checks.process_ratio(found)
    checked = job.device in PROCESS_CHECKED
    gap = checks.processes_disagree(found) if checked else None
    own = checks.draws_disagree(drawn, found) if drawn is not None and checked else None
    session.bind("main", make(job.seed))
    finding = (checks.after_unmeasured_warning(found) if checked and ratio is None else
               checks.after_warning(gap) if gap is not None else
               checks.draws_warning(own) if own is not None else None)
    return AfterCheck(round(ratio, 4) if ratio is not None else None, finding)


def _decided(job: EvaluateJob, draft: Draft, judged: Status, message: str = "") -> Evaluation:
    """The last findings, on the timing's samples and against the problem's floor, then the verdict: decided here,
    once, from everything the judge found (kbench.judge.verdict.decide)."""
    timing, eager = draft.row.timing, draft.row.eager_timing
    found, percent = timed_findings(job, timing, eager, job.floor)
    draft.warnings += found
    draft.row = dataclasses.replace(draft.row, percent_of_floor=percent)
    return draft.result(decide(judged, message, draft.warnings, Speedups.of(timing, eager, job.compile_gain)))


# Fresh candidate processes tried, one after another, when the candidate's process runs the reference itself at
# another speed than the judge's (timing.processes_disagree); if the last still does, the row is `suspect`.
PROCESS_RETRIES = 2
PROCESS_CHECKED = ("cuda",)  # on the CPU the ratio is recorded only: processes sharing two cores differ by more
# Where the reference is timed again in the candidate's process after the solution's rounds (judge_timing.after): a
# GPU-regime row whose reference allocates AFTER_MIN_BYTES or more in a call (a host-regime row divides by a witness)
AFTER_CHECKED = ("cuda",)
# Fresh candidate processes tried, one after another, when that check finds the two apart: each draws its memory anew
# (about half the draws fall on the other speed on #77); if the last still disagrees, the row is `suspect`
AFTER_RETRIES = 2


def _calibrated(job: EvaluateJob, session: Session, fresh: Callable[[Session], Session],
                calibrate_in: Callable[[Session], Calibration], draws: bool = False
                ) -> tuple[Session, Calibration, ProcessCheck, Finding | None]:
    """The calibration (`calibrate`), in a fresh candidate process (`fresh`) as long as the candidate's process runs
    the reference at another speed than the judge's, PROCESS_RETRIES times at most: the solution is imported into
    a process that agrees with the judge's, or its row is `suspect` with `[processes_disagree]` (the finding
    returned); with `draws` (a row whose memory both sides draw anew, timing.placement) the ratio is recorded only.
    Nothing of the solution's has run in any of these processes yet."""
    calibration = calibrate_in(session)
    ratios = [checks.process_ratio(calibration)]
    # On CUDA in the host regime the speedup divides by a witness, a candidate's kind of process (divided_by_witness)
    witnessed = job.device == "cuda" and calibration.eager_regime == Regime.HOST
    # Where both sides draw their memory anew (timing.placement), one draw each here says nothing: the check after the
    # solution's rounds compares their fastest draws
    act = job.device in PROCESS_CHECKED and not witnessed and not draws
    while act and checks.processes_disagree(calibration) is not None and len(ratios) <= PROCESS_RETRIES:
        session = fresh(session)
        calibration = calibrate_in(session)
        ratios.append(checks.process_ratio(calibration))
    gap = checks.processes_disagree(calibration) if act else None
    tried = ProcessCheck(tuple(round(r, 4) if r is not None else None for r in ratios), len(ratios) - 1,
                         disagrees=gap is not None)
    return session, calibration, tried, checks.processes_warning(gap, len(ratios)) if gap else None


def _fresh_session(job: EvaluateJob, old: Session, announce: Announce, started: list[CandidateProcess]) -> Session:
    """A new candidate process in place of `old`'s (ended, its buffers freed), pinned and sandboxed as it was."""
    old.release()
    cand = old.reserve.take(init_cuda=job.device == "cuda")
    started.append(cand)
    cand.announce(announce)
    pin_timing_core(job.device, cand)
    session = Session(cand, job.device, old.reserve)
    session.sandbox_plan, session.big_call = old.sandbox_plan, old.big_call
    return session


def _trust(job: EvaluateJob, session: Session, reference: Any, make: Callable[[int], list[Any]],
           draft: Draft, phases: Phases) -> None:
    """Checks beyond the verdict: determinism and the kernel profile with the candidate, then, with the candidate
    ended and every shared buffer freed, the float64 oracle (the evaluation's largest use of memory)."""
    device, seed = job.device, job.seed + 1
    keep = session.copied_outputs
    first, ref_first, warning = guarded(device, "the reference", lambda: trust.determinism(
        keep, lambda x: session.call_on(x)[0], reference, make, seed, device), judge_work="the determinism check")
    if warning is not None:
        draft.warnings.append(warning)
    phases.mark("trust_determinism")
    source = Path(job.solution.path).read_text()
    if trust.wants_kernel_profile(job):
        if kernel_names.declared(source):
            trust.kernel_profile(lambda: session.profile(make(seed), source), draft)
        else:
            trust.no_declared_kernels(draft)
        phases.mark("trust_profile")
    _finish(session, draft)
    session.release()
    tf32 = job.math.allows_tf32
    trust.accuracy(reference, make(seed), first, ref_first, device, tf32, draft)
    phases.mark("trust_fp64")


MEMORY_WARN_FACTOR = 4.0  # a solution whose calls need this many times the reference's memory, and
MEMORY_WARN_FLOOR = 256 << 20  # at least this much more, is flagged


def memory_warning(solution: int, reference: int | None) -> Finding | None:
    """`[memory]` when a solution's calls need far more GPU memory than the reference's (peaks above what was
    allocated before each call)."""
    if reference is None or solution <= max(MEMORY_WARN_FACTOR * reference, reference + MEMORY_WARN_FLOOR):
        return None
    return (Finding(FindingCode.MEMORY, f"a call of the solution allocates up to {solution / 2**20:.0f} MiB, "
            f"the reference's {reference / 2**20:.0f} MiB"))


def _free_cached(device: str) -> None:
    """Hand the judge's cached, unused blocks back to the device: the candidate's process cannot use them."""
    if device == "cuda":
        torch.cuda.empty_cache()


def _trials(job: EvaluateJob, session: Session, reference: Any, make: Callable[[int], list[Any]],
            seeds: list[int]) -> tuple[list[Any], list[Finding]]:
    """Correctness trials: the candidate's outputs stay in the shared buffers and are compared there, chunk by chunk,
    with the reference's output on the judge's own copy of the inputs (no clone of kbench's own)."""
    device = job.device
    found = guarded(device, "the reference", lambda: correctness.run_trials(
        make, session.call_on, reference, seeds, job.atol, job.rtol, sync=lambda: timers.synchronize(device)),
        judge_work="the correctness trials")
    _free_cached(device)
    return found


def _other_sizes(job: EvaluateJob, problem: Any, session: Session, draft: Draft) -> str:
    """Correctness trials at each further size (fresh models, inputs and buffers); a message on the first failure.

    A solution that hard-codes the sizes it was written for passes at one size and fails at another.
    """
    device, seed = job.device, job.seed
    for other in job.other_sizes:
        set_sizes(problem, other.overrides)
        reference, init, make = job_reference(problem, job)
        probe_inputs = make(seed)
        probe = guarded(device, "the reference", partial(reference, *probe_inputs),
                        judge_work=f"the reference's first call at size {other.name}")
        name = f"size {other.name}"
        try:
            session.build(name, reference, init, seed)
            session.bind(name, probe_inputs, probe)
            trials, _ = _trials(job, session, reference, make, [seed + 101 + i for i in range(job.trials)])
        except Verdict as v:
            raise Verdict(v.status, f"at size {other.name}: {v.message}") from None
        draft.row = dataclasses.replace(draft.row, size_checks={**draft.row.size_checks, other.name: tuple(trials)})
        del reference, probe
        if not all(t.passed for t in trials):
            return f"at size {other.name}: {trials[-1].message}"
    return ""


def _finish(session: Session, draft: Draft) -> None:
    """Ask the candidate what it changed in its process; the findings become warnings (see
    kbench.results.findings.SUSPECT)."""
    try:
        reply = session.ask(protocol.Finish())
    except Verdict:
        return
    patched = list(reply.patched)
    if patched:
        draft.warnings.append(Finding(FindingCode.MONKEY_PATCH, f"the solution replaced {', '.join(patched)} "
                                  "(its calls are judged in another process, timed with the originals)"))
    clocks = [p for p in patched if p in TIMING_CLOCKS]
    if clocks:
        draft.warnings.append(Finding(FindingCode.CLOCK_PATCHED, f"the solution replaced {', '.join(clocks)} "
                                      "in its process, where its own calls are timed"))
    changes = list(reply.state_changes)
    if changes:
        draft.warnings.append(Finding(FindingCode.STATE_CHANGED, "the solution changed process-wide settings: "
                                      f"{'; '.join(changes)} (restored before each call)"))

