"""The reference's own child: its eager timing (and torch.compile's, checked first), its checks and its floor.

Each model gets inputs drawn afresh before every round, as a solution's judge does (the same values for both
models, and no copy of kbench's own): only the call is timed. The `check` mode asks only whether the problem can
tell right from wrong at its tolerance.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from kbench.judge import backward, ceilings
from kbench.judge.candidate.session import Announce
from kbench.judge.checks import correctness, degeneracy, noise, trust
from kbench.judge.draft import Draft
from kbench.judge.harness import (
    Phases,
    apply_math_flags,
    describe_output,
    guarded,
    job_reference,
    load_problem,
    make_timer,
    timed_findings,
    with_peak,
)
from kbench.judge.timing import checks, sampling, timers
from kbench.judge.verdict import short
from kbench.results.diagnostics import Diagnostics, ReferenceNoise, ReferenceOutput
from kbench.results.figures import Floor, PeakMemory
from kbench.results.findings import Finding
from kbench.results.records import COMPILED, EAGER, CompileInfo, Evaluation, Measurement, Speedups, Status
from kbench.system import machine
from kbench.system.cores import pin, timing_core
from kbench.wire.jobs import OK, CheckJob, CheckResult, Judging, ReferenceJob, ReferenceResult

_perf_counter = time.perf_counter


def time_reference(job: ReferenceJob, announce: Announce, wait_turn: Callable[[], None] = lambda: None
                   ) -> ReferenceResult:
    """The eager reference timed (and, if asked, torch.compile of it, checked against eager and timed): their rows,
    filled here. What comes before `wait_turn` returns (the problem, the reference built and called, torch.compile
    checked) times nothing and may overlap the end of the slot's previous job (kbench.execution.pool.Turn)."""
    device, seed = job.device, job.seed
    apply_math_flags(job.math)
    phases = Phases()
    problem = load_problem(job.problem)
    with torch.no_grad():
        reference, _, make = job_reference(problem, job)
        result, peak, first, out = _first_call(job, reference, make, phases)
        models = {"eager": reference}
        compiled: Evaluation | None = None
        if job.compile_baseline:
            compiled, model = _check_compiled(job, reference, make, device)
            if model is not None:
                models["compiled"] = model
            phases.mark("compile")
        wait_turn()
        phases.mark("waiting")
        if device == "cuda":  # the core a solution's judge times from (system.cores.timing_core)
            pin(0, timing_core())
        measured = _time_models(job, reference, make, models, result)
        phases.mark("timing")
        # The checks below time nothing: the slot's next worker starts now and makes its CUDA context meanwhile
        # (kbench.execution.warm_starts), rather than after the job, while the next job waits for it.
        announce("timed")
        _checks(job, reference, make, first, out, result, phases)
        del first, out
    floor = None
    if device == "cuda" and job.ceilings_dir:
        floor = hardware_floor(job, reference, make(seed))
        phases.mark("floor")
    eager = measured["eager"]
    found, percent = timed_findings(job, eager, None, floor)
    rows = [dataclasses.replace(result.row, status=Status.CORRECT, timing=eager, eager_timing=eager,
                                speedup_vs_eager=1.0, warnings=(*result.warnings, *found), floor=floor,
                                percent_of_floor=percent, peak=PeakMemory(reference=peak), phases=dict(result.phases))]
    if compiled is not None:
        timing = measured.get("compiled")
        found, percent = timed_findings(job, timing, eager, floor)
        rows.append(dataclasses.replace(
            compiled, timing=timing, eager_timing=eager, warnings=tuple(found), percent_of_floor=percent,
            speedup_vs_eager=Speedups.of(timing, eager, None).speedup_vs_eager,
            speedup_vs_compile=1.0 if timing is not None else None))
    return ReferenceResult(Status.CORRECT, rows=tuple(rows))


def _first_call(job: ReferenceJob, reference: Any, make: Any,
                phases: Phases) -> tuple[Draft, Any, list[Any], Any]:
    """The reference's first call: the draft of the result, the call's peak memory, its inputs and its output (for
    `_checks`)."""
    first = make(job.seed)
    out, peak = guarded(job.device, "the reference", partial(with_peak, job.device, partial(reference, *first)))
    result = Draft(Evaluation(solution=EAGER, diagnostics=Diagnostics(output=describe_output(out))), phases.seconds)
    phases.mark("setup")
    return result, peak, first, out


def _checks(job: ReferenceJob, reference: Any, make: Any, first: list[Any], out: Any, result: Draft,
            phases: Phases) -> None:
    """The degenerate-output and noise checks on the first call's inputs and output (after the timing: they time
    nothing, and the next worker starts meanwhile)."""
    _degenerate_check(job, reference, make, out, result)
    phases.mark("degenerate_check")
    noise, found = _noise(job, reference, first, out)
    result.row = dataclasses.replace(result.row, diagnostics=dataclasses.replace(result.row.diagnostics, noise=noise))
    result.warnings += found
    phases.mark("noise_check")


def _time_models(job: ReferenceJob, reference: Any, make: Any, models: dict[str, Callable[..., Any]],
                 result: Draft) -> dict[str, Measurement]:
    """The models timed in rounds, fresh inputs before each (primed as the judge's rounds are); the machine's figures
    and warnings go into `result`."""
    device, seed = job.device, job.seed
    inputs: dict[str, list[Any]] = {}

    def fresh(index: int) -> None:
        for name in models:
            inputs.pop(name, None)  # the last round's go before this round's are drawn
            inputs[name] = make(seed + 1000 + index)
        sampling.settle(device)

    # Each model gets a timer of its own, in the regime its calls call for; primed as the judge's rounds are.
    timers = {name: make_timer(device) for name in models}
    probe = make(seed + 999)
    primed = {name: sampling.needs_priming(device, partial(model, *probe), timers[name])
              for name, model in models.items()}
    del probe

    def call(model: Any, name: str) -> Callable[[], Any]:  # the round's inputs, drawn by `fresh`
        return lambda: model(*inputs[name])

    samplers = {name: sampling.local_sampler(call(model, name), timers[name], primed[name])
                for name, model in models.items()}
    measured, state, busy = machine.watched(
        lambda: guarded(device, "timing", lambda: sampling.measure_rounds(samplers, job.timing, before_round=fresh)),
        device, own_processes=1)
    moved = checks.level_moved_warning(measured["eager"], "the eager reference")
    result.warnings += busy + ([moved] if moved else [])
    diagnostics = dataclasses.replace(result.row.diagnostics, machine=state, primed=primed["eager"],
                                      regimes={name: str(timer.regime) for name, timer in timers.items()})
    result.row = dataclasses.replace(result.row, diagnostics=diagnostics)
    inputs.clear()
    return measured


def _degenerate_check(job: Judging, reference: Any, make: Any, out: Any, result: Draft) -> None:
    """Can this problem tell right from wrong (`degeneracy.degenerate_findings`)? A harness check: if it cannot run
    (out of memory, say), `[check_skipped]` with the reason."""
    try:
        other = reference(*make(job.seed + 1))
        findings, found = degeneracy.degenerate_findings(out, other, job.atol, job.rtol)
    except Exception as exc:  # noqa: BLE001 - the harness's own check; the reference's row still stands
        findings, found = [trust.skipped("the degenerate-output check", exc)], None
    result.warnings += findings
    output = dataclasses.replace(result.row.diagnostics.output or ReferenceOutput(), degeneracy=found)
    result.row = dataclasses.replace(result.row, diagnostics=dataclasses.replace(result.row.diagnostics, output=output))


def _noise(job: Judging, reference: Any, inputs: list[Any], out: Any) -> tuple[ReferenceNoise | None, list[Finding]]:
    """The reference's own error against float64 at the run's precision and tolerance (kbench.judge.checks.noise)."""
    return noise.reference_noise(reference, inputs, out, job.device, job.precision, job.atol, job.rtol,
                                 job.math.allows_tf32)


def check_problem(job: CheckJob) -> CheckResult:
    """Can this problem tell right from wrong at its tolerance? (reference outputs for two input seeds)"""
    device, seed = job.device, job.seed
    apply_math_flags(job.math)
    problem = load_problem(job.problem)
    with torch.no_grad():
        reference, _, make = job_reference(problem, job)
        inputs = make(seed + 1)
        first = guarded(device, "the reference", lambda: reference(*inputs))
        second = guarded(device, "the reference", lambda: reference(*make(seed + 2)))
        findings, degenerate = degeneracy.degenerate_findings(first, second, job.atol, job.rtol)
        del second
        noise, found = _noise(job, reference, inputs, first)
    output = dataclasses.replace(describe_output(first), degeneracy=degenerate)
    return CheckResult(OK, findings=tuple(findings + found), output=output, noise=noise)


def hardware_floor(job: ReferenceJob, reference: Any, inputs: list[Any]) -> Floor:
    """The problem's floor on this GPU: minimal bytes over measured bandwidth, FLOPs over measured peak."""
    from kbench.measure import roofline  # heavy: the FLOP counter's imports take seconds (triton among them)

    if isinstance(reference, backward.Gradients):  # the forward's floor: a lower bound of forward and backward
        reference, inputs = reference.model, inputs[:-1]
    work = roofline.problem_work(reference, inputs, device="meta")
    peaks = ceilings.cached_ceilings(Path(str(job.ceilings_dir)), torch.device("cuda"), job.math.allows_tf32)
    return roofline.floor(work, peaks)


def _check_compiled(job: ReferenceJob, reference: Any, make: Any,
                    device: str) -> tuple[Evaluation, Callable[..., Any] | None]:
    """torch.compile of the reference, checked against eager on the correctness trials' seeds: its row (timed later),
    and the compiled model when it passed."""
    start = _perf_counter()
    model = backward.compiled(reference)
    seeds = [job.seed + 1 + i for i in range(job.trials)]
    try:
        trials, _ = correctness.run_trials(make, correctness.on_copies(model), reference, seeds, job.atol, job.rtol,
                                           sync=lambda: timers.synchronize(device))
        timers.synchronize(device)
    except Exception as exc:  # noqa: BLE001 - inductor needs a compiler toolchain; report, don't fail the problem
        return Evaluation(solution=COMPILED, status=Status.RUNTIME_ERROR,
                          message=f"torch.compile raised {short(exc)}", compile=CompileInfo(ok=True)), None
    row = Evaluation(solution=COMPILED, status=Status.CORRECT, trials=tuple(trials),
                     compile=CompileInfo(ok=True, seconds=_perf_counter() - start))
    if not all(t.passed for t in trials):
        return dataclasses.replace(row, status=Status.INCORRECT, message=trials[-1].message), None
    return row, model
