"""kbench list and import: the problems, their solutions, and solutions taken from LLM answers or KernelBench runs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer

from kbench.cli.app import command, progress
from kbench.cli.options import (
    DEFAULT,
    PROBLEMS_DIR,
    SOLUTIONS_DIR,
    Device,
    ProblemsDir,
    SolutionsDir,
    ToleranceProfile,
)
from kbench.errors import UsageError


@command("list")
def list_command(
    check: Annotated[bool, typer.Option("--check", help="Also check each reference for degenerate outputs at its tolerance.")] = False,
    problem: Annotated[list[str] | None, typer.Option("--problem", "-p", help="With --check: only these problems.")] = None,
    device: Device = DEFAULT.device,
    size: Annotated[str | None, typer.Option(help="With --check: full or small (default: full on CUDA, small on CPU).")] = DEFAULT.size,
    timeout: Annotated[float, typer.Option(min=1, help="With --check: seconds per problem.")] = 600.0,
    precision: Annotated[list[str] | None, typer.Option(help="With --check: fp32, fp16 or bf16; repeat for several. Default: each problem's own.")] = None,
    tolerance: ToleranceProfile = DEFAULT.tolerance,
    no_tf32: Annotated[bool, typer.Option("--no-tf32", help="With --check: TF32 off for cuDNN and matmul.")] = False,
    problems_dir: ProblemsDir = PROBLEMS_DIR,
    solutions_dir: SolutionsDir = SOLUTIONS_DIR,
) -> None:
    """List problems (origin, sizes, tolerance) and their solutions (supported devices).

    With --check, each reference is run for two input seeds: does a constant tensor (the output's
    mean) pass at the problem's tolerance? do outputs for different inputs agree within it? are most
    outputs zero? A problem with such a finding cannot tell a right answer from a wrong one. And how
    far is the reference from a float64 evaluation ("ref err vs fp64")? When an exact result fails the
    tolerance, only an implementation that reproduces the library's rounding can pass.

    Examples:

      kbench list

      kbench list --check --device cpu

      kbench list --check --precision fp32 --precision bf16 --tolerance kernelbench
    """
    from kbench.commands.build_and_check import check_problems  # slow: the pipeline; not for --help
    from kbench.commands.listing import check_table, listing  # heavy: pandas; not for --help
    from kbench.commands.progress import plain  # slow: the pipeline; not for --help

    # The terminal's width (COLUMNS first); 120 off a terminal. Names never split: a narrow terminal gets blocks.
    typer.echo(listing(problems_dir, solutions_dir, shutil.get_terminal_size((120, 24)).columns))
    if check:
        checks = check_problems(problem or [], problems_dir, device, size, timeout, plain(progress), precision or (),
                                tolerance, tf32=not no_tf32)
        typer.echo("\n" + check_table(checks))


@command("import")
def import_command(
    responses: Annotated[list[Path] | None, typer.Argument(help="LLM response files (text, markdown or .py), or folders of them.", show_default=False)] = None,
    problem: Annotated[str | None, typer.Option("--problem", "-p", help="The problem the responses answer: a name under problems/ or a path.", show_default=False)] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Solution name; with several responses a prefix (NAME_1, NAME_2, ...). Default: from each response's file name.")] = None,
    kernelbench_run: Annotated[Path | None, typer.Option("--kernelbench-run", help="A KernelBench run folder (runs/<run_name>): each level_L_problem_P_sample_S_kernel.py becomes solutions/<problem P of level L>/sample_S.py.", show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite a solution of the same name instead of skipping or renaming.")] = False,
    problems_dir: ProblemsDir = PROBLEMS_DIR,
    solutions_dir: SolutionsDir = SOLUTIONS_DIR,
) -> None:
    """Take the final ModelNew code out of LLM responses into solutions/<problem>/<name>.py; exit 1 if any fails.

    From each response it takes the last fenced Python block that defines class ModelNew (or the whole file
    when it is Python). A response cut off before its final answer is skipped with the reason.

    With --kernelbench-run, KernelBench's generated samples are mapped onto the problems of --problems-dir (a
    KernelBench levelN/ folder, the folder holding level1/ level2/ ..., or problems named <L>_<P>_<name>).

    Examples:

      kbench import answer.md --problem conv3d_gelu --name llm_try1

      kbench import responses/ -p conv3d_logsumexp

      kbench import --kernelbench-run ~/KernelBench/runs/my_run --problems-dir ~/KernelBench/KernelBench/level1
    """
    from kbench.problems.importer import import_responses  # slow: the pipeline; not for --help
    from kbench.problems.kernelbench_runs import import_run  # slow: the pipeline; not for --help

    if kernelbench_run is not None:
        if responses or problem or name:
            raise UsageError("--kernelbench-run takes no response files, --problem or --name: the run's file "
                             "names say the problem and the sample")
        results, others = import_run(kernelbench_run, problems_dir, solutions_dir, force)
        if others:
            typer.echo(f"not imported: {others} file(s) of the run that are not kernels (prompts, eval results)")
    else:
        if not responses or problem is None:
            raise UsageError("Give response files and --problem, or --kernelbench-run DIR")
        results = import_responses(responses, problem, name, problems_dir, solutions_dir, force)
    for r in results:
        typer.echo(f"imported {r.source} -> {r.solution}" if r.ok else f"skipped {r.source}: {r.reason}")
    if not all(r.ok for r in results):
        raise typer.Exit(code=1)
