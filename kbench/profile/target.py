"""The process ncu profiles: `python -m kbench.profile.target JOB RESULT`. It builds one model as an evaluation does,
warms it up, and makes one call between cudaProfilerStart and cudaProfilerStop (ncu runs with
--profile-from-start off, so only that call's kernels are measured). Eager and the solution each get a process of their
own, so their kernels never mix, and only the solution's imports the solution.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

from kbench.judge.candidate.loading import load_solution
from kbench.judge.harness import apply_math_flags, build_reference, construct, input_maker, load_problem
from kbench.judge.timing import timers
from kbench.judge.verdict import Verdict, short
from kbench.profile.jobs import TargetJob, TargetResult
from kbench.results.codec import decode_json, encode
from kbench.results.records import Status
from kbench.system import sandbox
from kbench.system.lifetime import die_with_parent

# ncu's injected library reports to ncu over a local TCP port (ncu --port), which the sandbox's network namespace
# (no interface) would cut, and its PID namespace forks the process ncu follows: under ncu only the limits apply.
UNDER_NCU = "namespaces not entered under ncu, whose injected library talks to ncu over a local socket"
SANDBOX_OFF = "the sandbox is switched off here (KBENCH_SANDBOX=none, or not Linux)"


def sandbox_limits() -> str:
    """The sandbox's limits for the solution's process where the sandbox is wanted; the level and why not more."""
    if not sandbox.wanted():
        return f"{sandbox.NONE} ({SANDBOX_OFF})"
    sandbox.limit()
    return f"{sandbox.LIMITS} ({UNDER_NCU})"


def solution_model(job: TargetJob, reference: Any, init: list[Any]) -> Any:
    """ModelNew built as the judge builds it: seeded, then given the reference's weights where names and shapes
    match."""
    assert job.solution is not None
    module, _ = load_solution(job.solution)
    try:
        model = construct(lambda: module.ModelNew(*init), job.seed, job.device, job.precision)
        own = model.state_dict()
        model.load_state_dict({k: v for k, v in reference.state_dict().items()
                               if k in own and own[k].shape == v.shape}, strict=False)
    except BaseException as exc:
        raise Verdict(Status.RUNTIME_ERROR, f"ModelNew(*get_init_inputs()) raised {short(exc)}") from exc
    return model


def profiled_call(job: TargetJob) -> str:
    """Build the model, warm it up, make the one profiled call; the sandbox level (of the solution's process)."""
    apply_math_flags(job.math)
    torch.set_grad_enabled(False)
    problem = load_problem(job.problem)
    reference, init = build_reference(problem, job.seed, job.device, job.precision)
    level = ""
    model = reference
    if job.solution is not None:
        level = sandbox_limits()  # before the solution is imported
        model = solution_model(job, reference, init)
        del reference
    inputs = input_maker(problem, job.device, job.precision)(job.seed)
    try:
        for _ in range(job.warmup_calls):
            model(*inputs)
        timers.synchronize(job.device)
        profiling = job.device == "cuda"  # the CPU runs only in tests, under a stand-in for ncu
        if profiling:
            torch.cuda.profiler.start()
        model(*inputs)
        timers.synchronize(job.device)
        if profiling:
            torch.cuda.profiler.stop()
    except BaseException as exc:
        raise Verdict(Status.RUNTIME_ERROR, f"the model raised {short(exc)}") from exc
    return level


def main(argv: list[str]) -> int:
    job_path, result_path = argv
    os.dup2(2, 1)  # what the models print goes to stderr: ncu's stdout carries its own lines and its CSV alone
    die_with_parent()
    job = decode_json(TargetJob, Path(job_path).read_text(encoding="utf-8"))
    try:
        result = TargetResult(sandbox=profiled_call(job))
    except Verdict as v:
        result = TargetResult(failure=Status(v.status), message=v.message)
    except BaseException as exc:  # noqa: BLE001 - the problem's own code may raise anything
        result = TargetResult(failure=Status.RUNTIME_ERROR, message=short(exc))
    Path(result_path).write_text(encode(result), encoding="utf-8")
    return 0 if result.failure is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
