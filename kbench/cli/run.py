"""kbench run, build, baseline and gate: the commands that build and evaluate solutions."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kbench.cli.app import command
from kbench.cli.options import (
    DEFAULT,
    PROBLEMS_DIR,
    SOLUTIONS_DIR,
    CacheDir,
    Device,
    Jobs,
    NoCompileBaseline,
    Problems,
    ProblemsDir,
    Resume,
    RetryCrashed,
    ShowProgress,
    Size,
    Solutions,
    SolutionsDir,
    Timeout,
    Trials,
    fraction,
    run_config,
    with_settings,
)

if TYPE_CHECKING:
    from kbench.results.records import Evaluation
    from kbench.results.storage import RunStore


@command("run")
@with_settings
def run_command(
    problem: Problems = None,
    solution: Solutions = None,
    device: Device = DEFAULT.device,
    size: Size = DEFAULT.size,
    trials: Trials = DEFAULT.trials,
    atol: Annotated[float | None, typer.Option(help="Absolute tolerance. Default: the problem's own (1e-2 unless it declares one).")] = None,
    rtol: Annotated[float | None, typer.Option(help="Relative tolerance. Default: the problem's own.")] = None,
    no_tf32: Annotated[bool, typer.Option("--no-tf32", help="Turn TF32 off for cuDNN (and matmul) in reference and solution alike.")] = False,
    no_compile_baseline: NoCompileBaseline = False,
    two_sizes: Annotated[bool | None, typer.Option("--two-sizes/--one-size", help="Also check correctness at the other size (full/small). Default: yes on CUDA, no on CPU.")] = DEFAULT.two_sizes,
    jobs: Jobs = DEFAULT.jobs,
    seed: Annotated[int, typer.Option(help="Seed for weights; trial i uses seed + 1 + i for inputs.")] = DEFAULT.seed,
    executor: Annotated[str, typer.Option(help="local (one evaluation per visible GPU) or ray (Ray tasks, one GPU each).")] = DEFAULT.executor,
    address: Annotated[str | None, typer.Option(help="Ray cluster address (with --executor ray). Default: a local Ray instance.")] = DEFAULT.address,
    parallel: Annotated[int | None, typer.Option(min=1, help="With --executor ray: evaluations at once. Default: the cluster's GPUs (CPU: 1).")] = DEFAULT.parallel,
    kernel_profile: Annotated[bool, typer.Option("--kernel-profile/--no-kernel-profile", help="Profile each CUDA solution for the share of GPU time in its own kernels (the no_custom_kernel check). Off saves about 4 s per evaluation (the profiler's start-up).")] = DEFAULT.kernel_profile,
    resume: Resume = None,
    retry_crashed: RetryCrashed = False,
    cache_dir: CacheDir = DEFAULT.cache_dir,
    problems_dir: ProblemsDir = PROBLEMS_DIR,
    solutions_dir: SolutionsDir = SOLUTIONS_DIR,
    show_progress: ShowProgress = None,
    **settings: Any,
) -> None:
    """Compile, validate and time solutions against their reference; write results/<run-id>/.

    Examples:

      kbench run --problem conv3d_logsumexp

      kbench run -p conv3d_gelu -s cuda_fused -s triton_fused

      kbench run -p conv3d_gelu -s triton_backward --backward --max-time 5

      kbench run -p ~/KernelBench/level2/43_Conv3d_Max_LogSumExp_ReLU.py -s my_solution.py

      kbench run --problems-dir ~/KernelBench/level1 --solutions-dir my_solutions/

      kbench run --resume 20261122-074644-be41 --retry-crashed

      kbench run -p conv3d_gelu --precision bf16 --tolerance kernelbench

      kbench run --executor ray --address ray://head:10001
    """
    from kbench.cli.live import progress_sink  # slow: rich.live and the pipeline; not for --help
    from kbench.commands.run import run  # heavy: pandas; not for --help

    config = run_config(device=device, size=size, trials=trials, atol=atol, rtol=rtol, no_tf32=no_tf32,
                        no_compile_baseline=no_compile_baseline, two_sizes=two_sizes, jobs=jobs, cache_dir=cache_dir,
                        seed=seed, executor=executor, address=address, parallel=parallel,
                        kernel_profile=kernel_profile, **settings)
    with progress_sink(show_progress) as progress:
        store = run(config, problem or [], solution or [], problems_dir, solutions_dir, progress, resume, retry_crashed)
    _show_run(store)


def _show_run(store: RunStore) -> None:
    """The results table and the run's folder on stdout (after the progress display has stopped); exit 1 when any
    row is not correct."""
    from kbench.reports.tables import run_table, to_terminal  # heavy: pandas; not for --help

    typer.echo(to_terminal(run_table(store.evaluations)))
    typer.echo(f"\nresults: {store.directory}")
    _exit_unless_correct(store.evaluations)


def _exit_unless_correct(evaluations: Sequence[Evaluation]) -> None:
    """Exit 1, saying how many rows and which statuses, when any row is not correct."""
    from kbench.commands.run import not_correct  # heavy: pandas; not for --help

    failed = not_correct(evaluations)
    if failed:
        typer.echo(f"{len(failed)} of {len(evaluations)} row(s) not correct "
                   f"({', '.join(sorted({e.status.value for e in failed}))}): exit 1", err=True)
        raise typer.Exit(1)


@command("build")
def build_command(
    problem: Problems = None,
    solution: Solutions = None,
    jobs: Jobs = DEFAULT.jobs,
    timeout: Timeout = DEFAULT.timeout_s,
    cache_dir: CacheDir = DEFAULT.cache_dir,
    problems_dir: ProblemsDir = PROBLEMS_DIR,
    solutions_dir: SolutionsDir = SOLUTIONS_DIR,
    show_progress: ShowProgress = None,
) -> None:
    """Compile and link solutions without running them (no GPU needed); exit 1 if any fails.

    CUDA solutions build on a machine without a GPU when a CUDA toolkit is found: kbench sets
    CUDA_HOME itself and, with no GPU to ask, TORCH_CUDA_ARCH_LIST=9.0 unless you set it.

    Examples:

      kbench build

      kbench build -p conv3d_gelu -s cuda_fused
    """
    from kbench.cli.live import progress_sink  # slow: rich.live and the pipeline; not for --help
    from kbench.commands.build_and_check import build_only  # slow: the pipeline; not for --help
    from kbench.reports.tables import build_table  # heavy: pandas; not for --help

    with progress_sink(show_progress) as progress:
        results = build_only(problem or [], solution or [], problems_dir, solutions_dir, cache_dir, jobs, timeout, progress)
    typer.echo(build_table(results))
    failed = [r for r in results if not r.ok]
    for r in failed:
        typer.echo(f"\n--- {r.solution.problem}/{r.solution.name}: {r.status} ---\n{r.compile.log[-3000:]}", err=True)
    if failed:
        raise typer.Exit(code=1)


@command("baseline")
@with_settings
def baseline_command(
    problem: Problems = None,
    name: Annotated[str | None, typer.Option(help="Baseline name: results/baselines/<name>.json. Default: the GPU's name (and -fp16/-bf16 at those precisions).")] = None,
    device: Device = DEFAULT.device,
    size: Size = DEFAULT.size,
    no_compile_baseline: NoCompileBaseline = False,
    resume: Resume = None,
    problems_dir: ProblemsDir = PROBLEMS_DIR,
    show_progress: ShowProgress = None,
    **settings: Any,
) -> None:
    """Time only the references (eager and torch.compile) of a problem suite and store them as a baseline.

    Examples:

      kbench baseline

      kbench baseline --problems-dir ~/KernelBench/level1 --name level1-h100

      kbench baseline --problems-dir ~/KernelBench/level1 --name level1-h100 --resume 20261123-101500-ab12

      kbench baseline --problems-dir ~/KernelBench/level1 --precision bf16

      kbench baseline --problems-dir ~/KernelBench/level1 --backward --name level1-h100-backward
    """
    from kbench.cli.live import progress_sink  # slow: rich.live and the pipeline; not for --help
    from kbench.commands.baseline import baseline  # heavy: pandas; not for --help
    from kbench.reports.tables import run_table, to_terminal  # heavy: pandas; not for --help

    config = run_config(device=device, size=size, no_compile_baseline=no_compile_baseline, **settings)
    with progress_sink(show_progress) as progress:
        store, target = baseline(config, problem or [], problems_dir, name, progress, resume)
    typer.echo(to_terminal(run_table(store.evaluations)))
    typer.echo(f"\nbaseline: {target}")


@command("gate")
@with_settings
def gate_command(
    problem: Problems = None,
    solution: Solutions = None,
    baseline: Annotated[str | None, typer.Option(help="GPU only: fail solutions slower than this baseline beyond noise.")] = None,
    max_regression: Annotated[str, typer.Option(help="Slowdown allowed against --baseline before a solution fails.")] = "5%",
    junit: Annotated[Path | None, typer.Option(help="Also write a JUnit XML report here.")] = None,
    trials: Trials = DEFAULT.trials,
    jobs: Jobs = DEFAULT.jobs,
    cache_dir: CacheDir = DEFAULT.cache_dir,
    problems_dir: ProblemsDir = PROBLEMS_DIR,
    solutions_dir: SolutionsDir = SOLUTIONS_DIR,
    show_progress: ShowProgress = None,
    **settings: Any,
) -> None:
    """The CI correctness gate: exit 0 only when every selected solution passes every check run here.

    With a GPU: each CUDA solution must build and be correct at full and small size (and, with
    --baseline, not be slower than the baseline beyond noise). Without one: every CUDA solution must
    compile and link, and every CPU solution must be correct at small size. What could not be
    checked is said plainly; the gate never passes on zero checks.

    Examples:

      kbench gate

      kbench gate --junit results/gate.xml

      kbench gate --baseline h100 --max-regression 5%

      kbench gate --backward
    """
    from kbench.cli.live import progress_sink  # slow: rich.live and the pipeline; not for --help
    from kbench.commands.gate import FAIL, PASS, SKIP, gate, write_junit  # heavy: pandas; not for --help

    config = run_config(trials=trials, jobs=jobs, cache_dir=cache_dir, **settings)
    with progress_sink(show_progress) as progress:
        result = gate(problem or [], solution or [], problems_dir, solutions_dir, config, baseline, fraction(max_regression),
                      progress)
    if junit is not None:
        write_junit(result, junit)
    for check in result.checks:
        if check.outcome == FAIL:
            typer.secho(f"FAIL {check.problem}/{check.solution} {check.name}: {check.message}", fg=typer.colors.RED)
            typer.echo(f"     reproduce: {check.reproduce}")
    for note in result.notes:
        typer.echo(f"not checked here: {note}")
    verdict = "PASSED" if result.passed else "FAILED"
    typer.echo(f"gate {verdict} ({result.mode}): {result.count(PASS)} passed, {result.count(FAIL)} failed, "
               f"{result.count(SKIP)} skipped")
    if not result.passed:
        if result.count(PASS) == 0 and result.count(FAIL) == 0:
            typer.echo("no check ran, so the gate cannot pass")
        raise typer.Exit(code=1)
