"""kbench profile: one solution's kernels and eager's under Nsight Compute (ncu)."""

from __future__ import annotations

from typing import Annotated

import typer

from kbench.cli.app import command, progress
from kbench.cli.options import (
    DEFAULT,
    PROBLEMS_DIR,
    SOLUTIONS_DIR,
    CacheDir,
    ProblemsDir,
    ResultsDir,
    SolutionsDir,
    Timeout,
)


@command("profile")
def profile_command(
    problem: Annotated[str | None, typer.Option("--problem", "-p", help="The problem: a name under problems/ or a path to a KernelBench-format .py file.")] = None,
    solution: Annotated[list[str] | None, typer.Option("--solution", "-s", help="The solution (CUDA): a name in solutions/<problem>/ or a path to a ModelNew file (one).")] = None,
    timeout: Timeout = DEFAULT.timeout_s,
    results_dir: ResultsDir = DEFAULT.results_dir,
    cache_dir: CacheDir = DEFAULT.cache_dir,
    problems_dir: ProblemsDir = PROBLEMS_DIR,
    solutions_dir: SolutionsDir = SOLUTIONS_DIR,
) -> None:
    """Per-kernel figures of one call of a solution, and of eager, from Nsight Compute (ncu must be installed).

    Use it once a solution is correct and you want to know why it is slow: per kernel, its duration, DRAM
    bandwidth, SM and tensor-core throughput, occupancy, registers and shared memory, and the roofline limit
    it sits closest to. Each model runs in its own process as in an evaluation (weights and inputs alike),
    three warm-up calls then one profiled call; clocks are not locked. Writes results/<run-id>/run.json
    (its `profiles`) and report.html; exit 2 when ncu is not found.

    Examples:

      kbench profile -p convtranspose3d_softmax -s tf32_igemm

      kbench profile -p conv3d_gelu -s tf32_igemm --cache-dir ~/.cache/kbench/extensions
    """
    from kbench.commands.profile import ProfileRequest, profile  # slow: the pipeline; not for --help
    from kbench.commands.progress import plain
    from kbench.config.run_config import RunConfig
    from kbench.reports.html import write_html_report  # heavy: pandas and jinja2; not for --help
    from kbench.reports.profile_view import terminal

    config = RunConfig(device="cuda", timeout_s=timeout, results_dir=results_dir, cache_dir=cache_dir)
    request = ProfileRequest([problem] if problem else [], solution or [], problems_dir, solutions_dir, config)
    run = profile(request, plain(progress))
    typer.echo(terminal(run.profiles))
    typer.echo(f"\nresults: {run.directory}")
    typer.echo(f"html:    {write_html_report(str(run.directory), results_dir)}")
