"""The child process of one job: a solution's judge, the reference's timing, a problem check, a build or a probe.

Run as `python -m kbench.execution.worker --result-fd N` with the job as JSON on stdin. The result goes to
the inherited pipe N, never to stdout, so nothing a solution prints can pass for a result. In the
`evaluate` mode this process is the judge (kbench.judge.judge) and never imports the solution; only the
`build` mode imports one, to compile its extensions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Any

import torch

from kbench.judge import correctness, degeneracy, noise, trust
from kbench.measure import timing
from kbench.system import machine
from kbench.judge.harness import (
    Phases, apply_math_flags, describe_output, guarded, job_reference, load_problem, make_timer, pin, timing_core,
    with_peak,
)
from kbench.judge.loading import load_solution
from kbench.judge.verdicts import short, Verdict
from kbench.results.records import MathFlags, TimingPolicy
from kbench.system.toolkit import BUILT_MARKER

_perf_counter = time.perf_counter
_announce: Any = lambda event, **fields: None  # main() points it at the result pipe: a progress event for the parent
_spare: Any = None  # a candidate process spawned while this worker waited for its job (--warm)


def evaluate(job: dict[str, Any]) -> dict[str, Any]:
    """A solution's evaluation: this process becomes its judge (kbench.judge.judge), the solution runs in a child of it."""
    from kbench.judge import judge

    return judge.evaluate(job, _announce, _spare)


def time_reference(job: dict[str, Any]) -> dict[str, Any]:
    """The eager reference timed (and, if asked, torch.compile of it, checked against eager and timed).

    Each model gets inputs drawn afresh before every round, as the judge does beside a solution (the same values for
    both models, and no copy of kbench's own): only the call is timed.
    """
    device, seed = job["device"], job["seed"]
    policy = TimingPolicy(**job["timing"])
    apply_math_flags(MathFlags(**job["math"]))
    if device == "cuda":  # the core a solution's judge times from (harness.timing_core)
        pin(0, timing_core())
    phases = Phases()
    problem = load_problem(job)
    with torch.no_grad():
        reference, _, make = job_reference(problem, job)
        result, peak = _checked_reference(job, reference, make, phases)
        models = {"eager": reference}
        compiled: dict[str, Any] | None = None
        if job.get("compile_baseline"):
            compiled = _check_compiled(job, reference, make, device)
            if compiled["status"] == "correct":
                models["compiled"] = compiled.pop("model")
            phases.mark("compile")
        measured = _time_models(job, policy, reference, make, models, result)
        phases.mark("timing")
        _announce("timed")
    result["timing"] = measured["eager"].to_json()
    result["extra"]["peak_bytes"] = {"reference": peak}
    if device == "cuda" and job.get("ceilings_dir"):
        result["floor"] = hardware_floor(job, reference, make(seed))
        phases.mark("floor")
    if compiled is not None:
        if "compiled" in measured:
            compiled["timing"] = measured["compiled"].to_json()
            compiled["eager_timing"] = result["timing"]
        result["compiled"] = compiled
    return result


def _checked_reference(job: dict[str, Any], reference: Any, make: Any, phases: Phases) -> tuple[dict[str, Any], Any]:
    """The reference's first call, then its degenerate-output and noise checks: the result so far, and the first
    call's peak memory."""
    device, seed = job["device"], job["seed"]
    first = make(seed)
    out, peak = guarded(device, "the reference", partial(with_peak, device, partial(reference, *first)))
    result: dict[str, Any] = {"status": "correct", "message": "", "output": describe_output(out), "warnings": [],
                              "extra": {"phases": phases.seconds}}
    phases.mark("setup")
    _degenerate_check(job, reference, make, out, result)
    phases.mark("degenerate_check")
    result["extra"]["noise"], found = _noise(job, reference, first, out)
    result["warnings"] += found
    del out, first
    phases.mark("noise_check")
    return result, peak


def _time_models(job: dict[str, Any], policy: TimingPolicy, reference: Any, make: Any, models: dict[str, Any],
                 result: dict[str, Any]) -> dict[str, Any]:
    """The models timed in rounds, fresh inputs before each (primed as the judge's rounds are); the machine's figures
    and warnings go into `result`."""
    device, seed = job["device"], job["seed"]
    timer = make_timer(device)
    inputs: dict[str, list[Any] | None] = {}

    def fresh(index: int) -> None:
        for name in models:
            inputs[name] = None  # the last round's go before this round's are drawn
            inputs[name] = make(seed + 1000 + index)
        timing.settle(device)

    primed = timing.primes(device, partial(reference, *make(seed + 999)), timer)  # as the judge's rounds
    samplers = {name: timing.local_sampler(lambda m=model, n=name: m(*inputs[n]), timer, primed)
                for name, model in models.items()}
    measured, result["extra"]["machine"], busy = machine.watched(
        lambda: guarded(device, "timing", lambda: timing.measure_rounds(samplers, policy, before_round=fresh)),
        device, own_processes=1)
    moved = timing.level_moved_warning(measured["eager"], "the eager reference")
    result["warnings"] += busy + ([moved] if moved else [])
    result["extra"]["primed"] = primed
    inputs.clear()
    return measured


def _degenerate_check(job: dict[str, Any], reference: Any, make: Any, out: Any, result: dict[str, Any]) -> None:
    """Can this problem tell right from wrong (`degeneracy.degenerate_findings`)? A harness check: if it cannot run
    (out of memory, say), `[check_skipped]` with the reason."""
    try:
        other = reference(*make(job["seed"] + 1))
        findings, figures = degeneracy.degenerate_findings(out, other, job["atol"], job["rtol"])
    except Exception as exc:  # noqa: BLE001 - the harness's own check; the reference's row still stands
        findings, figures = [trust.skipped("the degenerate-output check", exc)], {}
    result["warnings"] += findings
    result["output"].update(figures)


def _noise(job: dict[str, Any], reference: Any, inputs: list[Any], out: Any) -> tuple[dict[str, Any], list[str]]:
    """The reference's own error against float64 at the run's precision and tolerance (kbench.judge.noise)."""
    return noise.reference_noise(reference, inputs, out, job["device"], job.get("precision", "fp32"), job["atol"],
                                 job["rtol"], MathFlags(**job["math"]).allows_tf32)


def check_problem(job: dict[str, Any]) -> dict[str, Any]:
    """Can this problem tell right from wrong at its tolerance? (reference outputs for two input seeds)"""
    device, seed = job["device"], job["seed"]
    apply_math_flags(MathFlags(**job["math"]))
    problem = load_problem(job)
    with torch.no_grad():
        reference, _, make = job_reference(problem, job)
        inputs = make(seed + 1)
        first = guarded(device, "the reference", lambda: reference(*inputs))
        second = guarded(device, "the reference", lambda: reference(*make(seed + 2)))
        findings, figures = degeneracy.degenerate_findings(first, second, job["atol"], job["rtol"])
        del second
        figures["noise"], found = _noise(job, reference, inputs, first)
    return {"status": "correct", "message": "", "findings": findings + found,
            "figures": {**figures, **describe_output(first)}}


def hardware_floor(job: dict[str, Any], reference: Any, inputs: list[Any]) -> dict[str, Any]:
    """The problem's floor on this GPU: minimal bytes over measured bandwidth, FLOPs over measured peak."""
    from kbench.measure import ceilings, roofline

    flags = MathFlags(**job["math"])
    work = roofline.problem_work(reference, inputs, device="meta")
    ceilings = ceilings.cached_ceilings(Path(job["ceilings_dir"]), torch.device("cuda"), flags.allows_tf32)
    return roofline.floor_to_json(roofline.floor(work, ceilings))


def _check_compiled(job: dict[str, Any], reference: Any, make: Any, device: str) -> dict[str, Any]:
    start = _perf_counter()
    model = torch.compile(reference)
    seeds = [job["seed"] + 1 + i for i in range(job["trials"])]
    try:
        trials, _ = correctness.run_trials(make, correctness.on_copies(model), reference, seeds, job["atol"], job["rtol"],
                                           sync=lambda: timing.synchronize(device))
        timing.synchronize(device)
    except Exception as exc:  # inductor needs a working compiler toolchain; report, don't fail the problem
        return {"status": "runtime_error", "message": f"torch.compile raised {short(exc)}"}
    info = {"trials": [t.__dict__ for t in trials], "compile": {"seconds": _perf_counter() - start}}
    if not all(t.passed for t in trials):
        return {**info, "status": "incorrect", "message": trials[-1].message}
    return {**info, "status": "correct", "message": "", "model": model}


def build(job: dict[str, Any]) -> dict[str, Any]:
    """Import the solution once so its extensions compile into the cache; run nothing."""
    _, info = load_solution(job["solution"]["path"])
    Path(os.environ["TORCH_EXTENSIONS_DIR"], BUILT_MARKER).touch()
    return {"status": "ok", "message": "", "compile": info}


def probe(job: dict[str, Any]) -> dict[str, Any]:
    from kbench.system.environment import describe_torch

    return {"status": "ok", "environment": describe_torch()}


def _warm_flop_counter() -> None:
    """The first FLOP count in a process costs seconds (imports, the counter's set-up): pay it before the job."""
    from kbench.measure import roofline

    roofline.problem_work(torch.nn.Linear(2, 2), [torch.zeros(1, 2)], device="meta")


MODES = {"evaluate": evaluate, "reference": time_reference, "build": build, "probe": probe, "check": check_problem}


def main() -> None:
    parser = argparse.ArgumentParser(description="kbench evaluation child (internal)")
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--warm", action="store_true", help="started ahead of its job: make the CUDA contexts first")
    args = parser.parse_args()
    serve(args.result_fd, args.warm)


def serve(result_fd: int, warm: bool, forked: bool = False) -> None:
    """Take one job from stdin, write its result to result_fd, exit.

    A worker forked by the zygote (kbench.execution.zygote) forks its candidate now, before it has a job or a CUDA context
    (the candidate inherits nothing of a job); a worker started ahead of a CUDA job (`warm`) spawns it now. Either way
    with `warm` both make their CUDA contexts before the job arrives."""
    global _spare
    if forked or warm:
        from kbench.judge.candidate import warm_cuda
        from kbench.judge.judge import CandidateProcess

        _spare = CandidateProcess(init_cuda=warm, fork=forked)
        if warm:
            warm_cuda()
    if warm and not forked:
        _warm_flop_counter()  # a forked worker has it from the zygote
    job = json.loads(sys.stdin.read())
    if _spare is not None and job.get("mode") != "evaluate":
        _spare.kill()
        _spare = None
    os.environ.update(job.get("env", {}))  # what differs between jobs (kbench.execution.child.JOB_ENV)
    out = os.fdopen(result_fd, "w")

    def announce(event: str, **fields: Any) -> None:
        out.write(json.dumps({**fields, "token": job["token"], "event": event}) + "\n")
        out.flush()

    global _announce
    _announce = announce
    try:
        result = MODES[job["mode"]](job)
    except Verdict as v:
        result = {"status": v.status, "message": v.message}
    except BaseException as exc:  # noqa: BLE001 - any failure must still produce one result
        traceback.print_exc()
        result = {"status": "runtime_error", "message": f"harness error: {short(exc)}"}
    sys.stdout.flush()
    sys.stderr.flush()
    out.write(json.dumps({"token": job["token"], "result": result}, default=str) + "\n")
    out.flush()
    # Skip interpreter teardown: a solution's atexit hooks or threads must not hang or alter the exit.
    os._exit(0)


if __name__ == "__main__":
    main()
