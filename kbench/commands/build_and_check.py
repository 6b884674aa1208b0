"""`kbench build` and `kbench list --check`: compile solutions, or check references, without a run."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from kbench.build.compile import BuildResult, build_all
from kbench.commands.evaluation import Plan, judging
from kbench.commands.machine import build_context, probe_environment, resolve_device, resolve_size
from kbench.commands.progress import Note, Planned, Progress, build_progress, build_started
from kbench.config.run_config import MathFlags, RunConfig
from kbench.config.tolerances import PRECISIONS, TOLERANCE_PROFILES
from kbench.errors import KbenchError, UsageError
from kbench.execution import isolation
from kbench.execution.child import answer
from kbench.problems.discovery import find_problem, list_problems, select
from kbench.results.diagnostics import ReferenceNoise, ReferenceOutput
from kbench.results.findings import Finding
from kbench.results.records import ProblemSpec
from kbench.wire.jobs import OK, CheckJob, CheckResult


def build_only(problem_refs: Sequence[str], solution_refs: Sequence[str], problems_dir: Path, solutions_dir: Path,
               cache_dir: Path | None, jobs: int, timeout_s: float,
               progress: Progress = lambda _: None) -> list[BuildResult]:
    """`kbench build`: compile and link the selected solutions (any device's) without running them."""
    _, solutions = select(problem_refs, solution_refs, problems_dir, solutions_dir)
    chosen = [s for group in solutions.values() for s in group]
    if not chosen:
        raise UsageError("No solutions selected, so nothing to build.")
    ctx = build_context(probe_environment(), cache_dir, timeout_s, jobs)
    needs_cuda = [s for s in chosen if "cuda" in s.devices]
    if needs_cuda and ctx.cuda_home is None:
        names = ", ".join(f"{s.problem}/{s.name}" for s in needs_cuda)
        raise KbenchError(f"No CUDA toolkit found for {names}. Set CUDA_HOME to the toolkit's folder.")
    progress(Planned(builds=len(chosen)))
    progress(Note(f"building {len(chosen)} solution(s) for arch {ctx.arch} (CUDA toolkit: {ctx.cuda_home or 'none'}) "
                  f"into {ctx.cache_dir} ..."))
    results = build_all(ctx, chosen, build_progress(progress), started=build_started(progress))
    return [results[s.path] for s in chosen]


@dataclasses.dataclass(frozen=True)
class ProblemCheck:
    problem: ProblemSpec
    size: str
    findings: tuple[Finding, ...]
    output: ReferenceOutput | None  # what the reference returns, and whether it can tell right from wrong
    noise: ReferenceNoise | None  # the reference's error against float64
    error: str = ""
    precision: str = "fp32"


def check_problems(problem_refs: Sequence[str], problems_dir: Path, device: str, size: str | None,
                   timeout_s: float, progress: Progress = lambda _: None, precisions: Sequence[str] = (),
                   profile: str = "problem", tf32: bool = True) -> list[ProblemCheck]:
    """`kbench list --check`: each reference's degenerate-output and noise checks, per precision (default: the
    problem's own), each in its own child."""
    bad = [p for p in precisions if p not in PRECISIONS] + ([profile] if profile not in TOLERANCE_PROFILES else [])
    if bad:
        raise UsageError(f"Unknown precision or tolerance profile {', '.join(bad)}: precisions are "
                         f"{', '.join(PRECISIONS)}, profiles {', '.join(TOLERANCE_PROFILES)}")
    problems = [find_problem(r, problems_dir) for r in problem_refs] if problem_refs else list_problems(problems_dir)
    env = probe_environment()
    device = resolve_device(device, env)
    size = resolve_size(size, device)
    checks = []
    for problem in problems:
        for precision in precisions or (problem.precision,):
            config = RunConfig(device=device, precision=precision, tolerance=profile, math=MathFlags.from_tf32(tf32))
            plan = Plan(config, device, size, env, None)  # type: ignore[arg-type]
            progress(Note(f"checking {problem.name} ({device}, {size}, {precision}) ..."))
            outcome = isolation.run_child(CheckJob(**judging(plan, problem)), timeout_s, isolation.worker_path_env())
            result = answer(outcome, CheckResult)
            error = "" if result.status == OK else (result.message or result.status)
            checks.append(ProblemCheck(problem, size, result.findings, result.output, result.noise, error, precision))
    return checks
