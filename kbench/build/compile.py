"""Compile solutions into a cache keyed by source hash, several at once, each in its own child."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kbench.execution import child, isolation
from kbench.execution.pool import drain
from kbench.judge.checks.static_checks import analyze
from kbench.results.findings import Finding
from kbench.results.records import CompileInfo, SolutionSpec, Status
from kbench.system import sandbox, toolkit
from kbench.wire.jobs import OK, BuildJob, BuildJobResult, JobStatus, SolutionRef

Launch = Callable[[BuildJob, float, dict[str, str]], child.ChildOutcome]

BUILD_LOG_CHARS = 20_000


@dataclass(frozen=True)
class BuildContext:
    cache_dir: Path
    cuda_home: Path | None
    arch: str
    torch_version: str
    timeout_s: float
    jobs: int


@dataclass(frozen=True)
class BuildResult:
    solution: SolutionSpec
    ok: bool
    status: JobStatus  # OK, or the failing evaluation status (compile_error, load_error, timeout, crashed)
    message: str
    compile: CompileInfo
    # what the static checks find in the source (heuristics: on the row as warnings, never deciding its status)
    findings: tuple[Finding, ...] = ()


def source_findings(solution: SolutionSpec) -> tuple[Finding, ...]:
    """The static checks' findings on the solution's source (kbench.judge.checks.static_checks)."""
    try:
        source = solution.path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ()
    return tuple(Finding(f.code, f.message) for f in analyze(source))


def extension_dir(ctx: BuildContext, solution: SolutionSpec) -> tuple[Path, str]:
    key = toolkit.cache_key(solution.path.read_bytes(), ctx.torch_version, ctx.arch)
    return ctx.cache_dir / key, key


def child_env(ctx: BuildContext, solution: SolutionSpec | None, max_jobs: int) -> dict[str, str]:
    """A child's environment. The reference's (solution None) differs from a solution's only by the extension dir and
    the kernel DSLs' caches, per-job variables (child.JOB_ENV), so one child started ahead serves either."""
    env = isolation.worker_path_env()
    ext, key = extension_dir(ctx, solution) if solution is not None else (None, "")
    env.update(toolkit.build_env(ext, ctx.cuda_home, ctx.arch, max_jobs))
    root = ctx.cache_dir.parent
    env.update(dsl_cache_env(root / SOLUTION_DSL_CACHES / key if key else root))
    return env


# The kernel DSLs' own compile caches, by environment variable: beside kbench's builds, not in the user's home. A
# solution's are its own (under SOLUTION_DSL_CACHES, by the key of its build folder): what one solution writes there
# (a kernel, a poisoned cache entry) no other solution reads; the references' (torch.compile's) are kbench's.
DSL_CACHES = {"TRITON_CACHE_DIR": "triton", "TILELANG_CACHE_DIR": "tilelang", "CUTE_DSL_CACHE_DIR": "cute_dsl"}
SOLUTION_DSL_CACHES = sandbox.SOLUTION_CACHES  # the sandbox hides the other solutions' caches from a candidate


def dsl_cache_env(root: Path) -> dict[str, str]:
    return {var: str(root / folder) for var, folder in DSL_CACHES.items()}


def zygote_env(cuda_home: Path | None) -> dict[str, str]:
    """What every child of a run shares (`child_env` without the per-job variables). It needs no probe, so the run's
    zygote can start importing while the machine is probed."""
    return child.shared_env({**isolation.worker_path_env(), **toolkit.build_env(None, cuda_home, "", 1)})


def needs_build(solution: SolutionSpec) -> bool:
    """Only files that use torch.utils.cpp_extension have anything to compile."""
    return b"cpp_extension" in solution.path.read_bytes()


def build_one(ctx: BuildContext, solution: SolutionSpec, max_jobs: int,
              launch: Launch = isolation.run_child) -> BuildResult:
    """Import the solution in a child so its load_inline calls compile into the cache directory.

    A file lock per cache key keeps two kbench processes from building the same extension at once.
    Import errors of files with nothing to build are left to the evaluation child, which reports them.
    """
    directory, key = extension_dir(ctx, solution)
    found = source_findings(solution)
    if not needs_build(solution):
        return BuildResult(solution, True, OK, "", CompileInfo(ok=True, log="nothing to build", cache_key=key),
                           found)
    directory.mkdir(parents=True, exist_ok=True)
    with open(ctx.cache_dir / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built_before = (directory / toolkit.BUILT_MARKER).exists()
        started = time.time()
        job = BuildJob(SolutionRef(solution.name, str(solution.path)))
        outcome = launch(job, ctx.timeout_s, child_env(ctx, solution, max_jobs))
        # ninja rebuilds even a cached extension when torch's headers are newer (a fresh install): not cached then.
        cached = built_before and not any(p.stat().st_mtime >= started for p in directory.rglob("*.so"))
    log = outcome.log[-BUILD_LOG_CHARS:]
    result = child.answer(outcome, BuildJobResult)
    failure = None if result.status == OK else (result.status, result.message)
    seconds = result.seconds if result.seconds is not None else outcome.seconds
    info = CompileInfo(ok=failure is None, seconds=seconds, cached=cached and failure is None, log=log, cache_key=key)
    if failure is not None:
        status, message = failure
        if status == Status.COMPILE_ERROR:
            message = toolkit.first_compiler_error(log) or message
        return BuildResult(solution, False, status, message, info, found)
    return BuildResult(solution, True, OK, "", info, found)


def build_all(
    ctx: BuildContext,
    solutions: Sequence[SolutionSpec],
    progress: Callable[[BuildResult, int, int], None] | None = None,
    launch: Launch = isolation.run_child,
    started: Callable[[SolutionSpec], None] | None = None,
) -> dict[Path, BuildResult]:
    """Build independent solutions in parallel; compiler threads are split between the jobs. `launch` starts each
    build's child (a run passes its executor's, whose workers are forked with everything imported); `started` hears
    of each build as it begins, `progress` as it ends."""
    if not solutions:
        return {}
    jobs = max(1, min(ctx.jobs or (os.cpu_count() or 1), len(solutions)))
    max_jobs = max(1, (os.cpu_count() or 1) // jobs)
    ctx.cache_dir.mkdir(parents=True, exist_ok=True)
    results: dict[Path, BuildResult] = {}

    def finished(future: Future[BuildResult]) -> None:
        result = future.result()
        results[result.solution.path] = result
        if progress:
            progress(result, len(results), len(solutions))

    def build(solution: SolutionSpec) -> BuildResult:
        if started:
            started(solution)
        return build_one(ctx, solution, max_jobs, launch)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        drain([pool.submit(build, s) for s in solutions], finished)
    return results
