"""The judge: one evaluation of a solution, decided in a process that never imports it.

The judge builds the reference, makes every input, keeps the reference's outputs and runs every comparison, the
float64 oracle and the timing (kbench.judge.judge_timing). The solution lives in a candidate process it spawns
(kbench.judge.candidate) and speaks to through kbench.judge.protocol. See the README's "The judge" for the protocol
and what each step defends.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from kbench.judge import correctness, kernel_names, protocol, trust
from kbench.measure import timers, timing
from kbench.system import escapes, sandbox
from kbench.judge.harness import (
    Phases, apply_math_flags, guarded, job_reference, load_problem, set_sizes, with_peak,
)
from kbench.judge.loading import load_failure
from kbench.judge.judge_timing import (
    calibrate, pin_timing_core, recalibrate, settle_mismatch, time_rounds, timing_warnings,
)
from kbench.judge.session import Announce, CandidateProcess, Session
from kbench.judge.verdicts import Verdict
from kbench.results.codec import decode
from kbench.results.jobs import EvaluateJob, EvaluateResult

TIMING_CLOCKS = ("torch.cuda.Event", "torch.cuda.synchronize", "torch.cuda.Event.elapsed_time", "time.perf_counter",
                 "time.time", "time.monotonic")


def evaluate(job: EvaluateJob, env: dict[str, str], announce: Announce,
             cand: CandidateProcess | None = None) -> EvaluateResult:
    """The `evaluate` mode of the worker: this process is the judge; the solution runs in a candidate it spawned
    (ahead of the job, when the worker was started ahead) and imports it with the job's `env`."""
    apply_math_flags(job.math)
    torch.set_grad_enabled(False)
    escapes.become_subreaper()  # before any of the solution's code runs: its orphans stay in view (kbench.system.escapes)
    cand = cand or CandidateProcess()
    cand.announce(announce)
    pin_timing_core(job.device, cand, judge=True)
    try:
        return _evaluate(job, env, Session(cand, job.device), announce)
    finally:
        cand.kill()
        escapes.kill_escaped(cand.proc.pid, cand.pgid)


def _evaluate(job: EvaluateJob, env: dict[str, str], session: Session, announce: Announce) -> EvaluateResult:
    """Each step in its order; `result` is the draft of the EvaluateResult, checked into one when it is done."""
    device, seed = job.device, job.seed
    phases = Phases()
    problem = load_problem(job.problem)
    reference, init, make = job_reference(problem, job)
    probe_inputs = make(seed)
    probe, ref_peak = guarded(device, "the reference", partial(with_peak, device, partial(reference, *probe_inputs)),
                              judge_work="the reference's first call")
    session.sandbox_plan = sandbox.plan_for(job.solution.path, env)  # in force before the solution is imported
    calibration = calibrate(job, session, reference, init, make, probe_inputs, probe)
    phases.mark("calibration")
    try:
        session.load(job.solution.path, env)
    except Verdict as v:
        raise load_failure(v) from None  # a kernel DSL missing here: not_run, as the machine cannot run it
    copied = session.build("main", reference, init, seed)
    session.bind("main", probe_inputs, probe)
    del probe, probe_inputs
    _free_cached(device)
    result: dict[str, Any] = {"warnings": [], "phases": phases.seconds,
                              "figures": {"state_dict_tensors_copied": copied, "sandbox": session.sandbox}}
    phases.mark("load")
    trials, warnings = _trials(job, session, reference, make, [seed + 1 + i for i in range(job.trials)])
    result["trials"] = trials
    result["warnings"] += warnings
    phases.mark("trials")
    if not all(t.passed for t in trials):
        _finish(session, result)
        return decode(EvaluateResult, {**result, "status": "incorrect", "message": trials[-1].message})
    failure = _other_sizes(job, problem, session, result)
    set_sizes(problem, job.problem.overrides)
    session.bind("main", make(seed))
    phases.mark("other_sizes")
    if failure:
        _finish(session, result)
        return decode(EvaluateResult, {**result, "status": "incorrect", "message": failure})
    measured, figures, result["figures"]["machine"], busy = time_rounds(job, session, reference, make, calibration)
    result["timing"], result["eager_timing"] = measured["solution"], measured["eager"]
    result["figures"]["protocol"] = figures
    found = timing_warnings(device, measured, calibration, figures)
    found, result["figures"]["protocol"]["recalibration"] = settle_mismatch(
        found, measured["solution"], device, lambda: recalibrate(job, reference, init, make))
    result["warnings"] += found + busy
    result["warnings"] += [w for w in (timing.level_moved_warning(measured["solution"], "the solution"),
                                       timing.level_moved_warning(measured["eager"], "the eager reference"))
                           if w is not None]
    phases.mark("timing")
    announce("timed")  # the parent may now start the next child (kbench.execution.warm_starts.WarmStarts)
    _trust(job, session, reference, make, result, phases)
    result["peak"] = {"solution": session.peak_bytes, "reference": ref_peak}
    if (warning := memory_warning(session.peak_bytes, ref_peak)) is not None:
        result["warnings"].append(warning)
    return decode(EvaluateResult, {**result, "status": "correct", "message": ""})


def _trust(job: EvaluateJob, session: Session, reference: Any, make: Callable[[int], list[Any]],
           result: dict[str, Any], phases: Phases) -> None:
    """Checks beyond the verdict: determinism and the kernel profile with the candidate, then, with the candidate
    ended and every shared buffer freed, the float64 oracle (the evaluation's largest use of memory)."""
    device, seed = job.device, job.seed + 1
    keep = session.copied_outputs
    first, ref_first, warning = guarded(device, "the reference", lambda: trust.determinism(
        keep, lambda x: session.call_on(x)[0], reference, make, seed, device), judge_work="the determinism check")
    if warning is not None:
        result["warnings"].append(warning)
    phases.mark("trust_determinism")
    source = Path(job.solution.path).read_text()
    if trust.wants_kernel_profile(job):
        if kernel_names.declared(source):
            trust.kernel_profile(lambda: session.profile(make(seed), source), result)
        else:
            trust.no_declared_kernels(result)
        phases.mark("trust_profile")
    _finish(session, result)
    session.release()
    tf32 = job.math.allows_tf32
    trust.accuracy(reference, make(seed), first, ref_first, device, tf32, result)
    phases.mark("trust_fp64")


MEMORY_WARN_FACTOR = 4.0  # a solution whose calls need this many times the reference's memory, and
MEMORY_WARN_FLOOR = 256 << 20  # at least this much more, is flagged


def memory_warning(solution: int, reference: int | None) -> str | None:
    """`[memory]` when a solution's calls need far more GPU memory than the reference's (peaks above what was
    allocated before each call)."""
    if reference is None or solution <= max(MEMORY_WARN_FACTOR * reference, reference + MEMORY_WARN_FLOOR):
        return None
    return (f"[memory] a call of the solution allocates up to {solution / 2**20:.0f} MiB, the reference's "
            f"{reference / 2**20:.0f} MiB")


def _free_cached(device: str) -> None:
    """Hand the judge's cached, unused blocks back to the device: the candidate's process cannot use them."""
    if device == "cuda":
        torch.cuda.empty_cache()


def _trials(job: EvaluateJob, session: Session, reference: Any, make: Callable[[int], list[Any]],
            seeds: list[int]) -> tuple[list[Any], list[str]]:
    """Correctness trials: the candidate's outputs stay in the shared buffers and are compared there, chunk by chunk,
    with the reference's output on the judge's own copy of the inputs (no clone of kbench's own)."""
    device = job.device
    found = guarded(device, "the reference", lambda: correctness.run_trials(
        make, session.call_on, reference, seeds, job.atol, job.rtol, sync=lambda: timers.synchronize(device)),
        judge_work="the correctness trials")
    _free_cached(device)
    return found


def _other_sizes(job: EvaluateJob, problem: Any, session: Session, result: dict[str, Any]) -> str:
    """Correctness trials at each further size (fresh models, inputs and buffers); a message on the first failure.

    A solution that hard-codes the sizes it was written for passes at one size and fails at another.
    """
    device, seed = job.device, job.seed
    result["size_checks"] = {}
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
        result["size_checks"][other.name] = trials
        del reference, probe
        if not all(t.passed for t in trials):
            return f"at size {other.name}: {trials[-1].message}"
    return ""


def _finish(session: Session, result: dict[str, Any]) -> None:
    """Ask the candidate what it changed in its process; the findings become warnings (see evaluation.SUSPECT_CODES)."""
    try:
        figures = session.ask(protocol.Finish()).figures
    except Verdict:
        return
    patched = [p for p in figures.get("patched", []) if isinstance(p, str)]
    if patched:
        result["warnings"].append(f"[monkey_patch] the solution replaced {', '.join(patched)} "
                                  "(its calls are judged in another process, timed with the originals)")
    clocks = [p for p in patched if p in TIMING_CLOCKS]
    if clocks:
        result["warnings"].append(f"[clock_patched] the solution replaced {', '.join(clocks)} in its process, "
                                  "where its own calls are timed")
    changes = [c for c in figures.get("state_changes", []) if isinstance(c, str)]
    if changes:
        result["warnings"].append(f"[state_changed] the solution changed process-wide settings: {'; '.join(changes)} "
                                  "(restored before each call)")

