"""`kbench profile`: one call of eager and of one solution under Nsight Compute; per-kernel figures into run.json."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kbench.build.compile import BuildContext, build_one, child_env
from kbench.commands.execute import problem_record
from kbench.commands.machine import build_context, probe_environment
from kbench.commands.progress import Note, Progress
from kbench.commands.run import selection_of
from kbench.config.run_config import RunConfig
from kbench.errors import ProfileError, UsageError
from kbench.problems.discovery import select
from kbench.profile import ncu
from kbench.profile.jobs import TargetJob
from kbench.profile.runner import profile_model, tool_version
from kbench.results.header import Environment, RunHeader
from kbench.results.profiles import ModelProfile
from kbench.results.records import EAGER, ProblemSpec, SolutionSpec
from kbench.results.storage import RunStore
from kbench.system import toolkit
from kbench.system.environment import git_info, host_info
from kbench.wire.jobs import ProblemRef

SIZE = "full"  # the size kbench times on a GPU


@dataclass(frozen=True)
class ProfileRequest:
    """What `kbench profile` was asked for (its options)."""

    problem_refs: Sequence[str]
    solution_refs: Sequence[str]  # exactly one
    problems_dir: Path
    solutions_dir: Path
    config: RunConfig  # results_dir, cache_dir, timeout_s, seed, math, precision


@dataclass(frozen=True)
class ProfileRun:
    """The profiles (eager first, then the solution) and the run folder that holds them."""

    directory: Path
    profiles: tuple[ModelProfile, ...]


def profile(request: ProfileRequest, progress: Progress = lambda _: None) -> ProfileRun:
    """`kbench profile`: eager's and the solution's kernels, each model in its own process under ncu.

    Returns:
        The ProfileRun: a ModelProfile per model (every kernel of one call after three warm-up calls, durations in ns),
        stored in results/<run-id>/run.json's `profiles`.

    Raises:
        UsageError: no ncu (exit 2), not exactly one problem and one solution, no GPU, a solution that is not CUDA's.
        ProfileError: the solution did not build, or ncu or a target failed.
    """
    tool = ncu.find_ncu(toolkit.find_cuda_home())
    problem, solution = _chosen(request)
    progress(Note("probing the machine ..."))
    env = probe_environment()
    if not env.get("gpu"):
        raise UsageError("kbench profile needs a CUDA GPU, and torch sees none here")
    config = request.config
    ctx = build_context(env, config.cache_dir, config.timeout_s, 1)
    _build(ctx, solution, progress)
    version = tool_version(tool)
    profiles = []
    for path, name in ((None, EAGER), (str(solution.path), solution.name)):
        progress(Note(f"profiling {problem.name}/{name} under {version or tool} ..."))
        job = TargetJob(ProblemRef(problem.name, str(problem.path), problem.overrides(SIZE)), path, config.seed,
                        config.precision_for(problem), config.math, config.timing.warmup_calls)
        env_of = child_env(ctx, solution if path else None, 1)
        profiles.append(profile_model(tool, job, env_of, config.timeout_s, problem.name, name, version))
    store = RunStore.create(config.results_dir, _header(request, problem, ctx, env))
    store.profiles = profiles
    store.finish()
    return ProfileRun(store.directory, tuple(profiles))


def _chosen(request: ProfileRequest) -> tuple[ProblemSpec, SolutionSpec]:
    if len(request.problem_refs) != 1 or len(request.solution_refs) != 1:
        raise UsageError("kbench profile takes one problem and one solution: -p PROBLEM -s SOLUTION")
    problems, solutions = select(request.problem_refs, request.solution_refs, request.problems_dir,
                                 request.solutions_dir)
    problem = problems[0]
    solution = solutions[problem.name][0]
    if "cuda" not in solution.devices:
        raise UsageError(f"{problem.name}/{solution.name} does not run on CUDA (it declares "
                         f"{', '.join(solution.devices)}): ncu profiles GPU kernels only")
    return problem, solution


def _build(ctx: BuildContext, solution: SolutionSpec, progress: Progress) -> None:
    """The solution built (or found built) in kbench's build cache, where `kbench run` finds it too."""
    progress(Note(f"building {solution.problem}/{solution.name} (cached builds are reused) ..."))
    built = build_one(ctx, solution, os.cpu_count() or 1)
    if not built.ok:
        raise ProfileError(f"{solution.problem}/{solution.name} did not build ({built.status}): "
                           f"{built.message.splitlines()[0] if built.message else 'see kbench build'}")


def _header(request: ProfileRequest, problem: ProblemSpec, ctx: BuildContext, env: Environment) -> RunHeader:
    """What a profile's run file records about itself, as a run's does (kbench.commands.execute)."""
    config = request.config
    return {
        "environment": {**env, "cuda_home": str(ctx.cuda_home) if ctx.cuda_home else None, "arch_list": ctx.arch,
                        **host_info()},
        "git": git_info(Path.cwd()),
        "config": {**dataclasses.asdict(config), "device": "cuda", "size": SIZE},
        "selection": selection_of(request.problem_refs, request.solution_refs, request.problems_dir,
                                  request.solutions_dir),
        "problems": {problem.name: problem_record(config, problem, SIZE)},
    }
