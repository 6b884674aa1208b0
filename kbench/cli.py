"""The kbench command line: parse options, call one library function, report errors on one line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kbench import __version__
from kbench.errors import KbenchError

app = typer.Typer(
    name="kbench",
    help="Check that a hand-written kernel solution is correct, and time it against its PyTorch reference.",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ProblemsDir = Annotated[Path, typer.Option("--problems-dir", help="Folder of problems (one sub-folder each).")]
SolutionsDir = Annotated[Path, typer.Option("--solutions-dir", help="Folder of solutions (solutions/<problem>/<name>.py).")]


def _fail(exc: KbenchError) -> typer.Exit:
    typer.secho(f"[error] {exc}", err=True, fg=typer.colors.RED)
    return typer.Exit(code=exc.exit_code)


def _progress(message: str) -> None:
    typer.echo(message, err=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kbench {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = None,
) -> None:
    """kbench: correctness and speed of ModelNew solutions against KernelBench-format problems."""


@app.command("list")
def list_command(problems_dir: ProblemsDir = Path("problems"), solutions_dir: SolutionsDir = Path("solutions")) -> None:
    """List problems (origin, sizes, tolerance) and their solutions (supported devices).

    Example: kbench list
    """
    from kbench.listing import listing

    try:
        typer.echo(listing(problems_dir, solutions_dir))
    except KbenchError as exc:
        raise _fail(exc) from None


@app.command("run")
def run_command(
    problem: Annotated[Optional[list[str]], typer.Option("--problem", "-p", help="Problem name or path to a KernelBench-format .py file; repeat for several. Default: all.")] = None,
    solution: Annotated[Optional[str], typer.Option("--solution", "-s", help="One solution: a name in solutions/<problem>/ or a path to a ModelNew file. Default: all of the problem's.")] = None,
    device: Annotated[str, typer.Option(help="auto, cuda or cpu.")] = "auto",
    size: Annotated[Optional[str], typer.Option(help="full or small. Default: full on CUDA, small on CPU.")] = None,
    trials: Annotated[int, typer.Option(min=1, help="Correctness trials, each with fresh random inputs.")] = 5,
    atol: Annotated[Optional[float], typer.Option(help="Absolute tolerance. Default: the problem's own (1e-2 unless it declares one).")] = None,
    rtol: Annotated[Optional[float], typer.Option(help="Relative tolerance. Default: the problem's own.")] = None,
    no_tf32: Annotated[bool, typer.Option("--no-tf32", help="Turn TF32 off for cuDNN (and matmul) in reference and solution alike.")] = False,
    no_compile_baseline: Annotated[bool, typer.Option("--no-compile-baseline", help="Skip timing the reference under torch.compile.")] = False,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds before one child (build or evaluation) is killed.")] = 900.0,
    jobs: Annotated[int, typer.Option(min=0, help="Solutions compiled in parallel; 0 = one per CPU core.")] = 0,
    max_time: Annotated[float, typer.Option(min=0.01, help="Cap on timing seconds per evaluation.")] = 10.0,
    seed: Annotated[int, typer.Option(help="Seed for weights; trial i uses seed + 1 + i for inputs.")] = 42,
    results_dir: Annotated[Path, typer.Option(help="Where results/<run-id>/ is written.")] = Path("results"),
    cache_dir: Annotated[Optional[Path], typer.Option(help="Extension build cache. Default: ~/.cache/kbench/extensions.")] = None,
    problems_dir: ProblemsDir = Path("problems"),
    solutions_dir: SolutionsDir = Path("solutions"),
) -> None:
    """Compile, validate and time solutions against their reference; write results/<run-id>/.

    Examples:

      kbench run --problem conv3d_logsumexp

      kbench run -p conv3d_gelu -s cuda_fused --max-time 5

      kbench run -p ~/KernelBench/level2/43_Conv3d_Max_LogSumExp_ReLU.py -s my_solution.py
    """
    from kbench.records import MathFlags, RunConfig, TimingPolicy
    from kbench.report import results_frame, to_terminal
    from kbench.runner import run

    config = RunConfig(
        device=device, size=size, trials=trials, atol=atol, rtol=rtol, math=MathFlags.from_tf32(not no_tf32),
        compile_baseline=not no_compile_baseline, timeout_s=timeout, jobs=jobs,
        timing=TimingPolicy(max_time_s=max_time), results_dir=results_dir, cache_dir=cache_dir, seed=seed,
    )
    try:
        store = run(config, problem or [], solution, problems_dir, solutions_dir, _progress)
    except KbenchError as exc:
        raise _fail(exc) from None
    typer.echo(to_terminal(results_frame(store.evaluations)))
    typer.echo(f"\nresults: {store.directory}")


@app.command("build")
def build_command(
    problem: Annotated[Optional[list[str]], typer.Option("--problem", "-p", help="Problem name or path; repeat for several. Default: all.")] = None,
    solution: Annotated[Optional[str], typer.Option("--solution", "-s", help="One solution (name or path). Default: all of each problem's.")] = None,
    jobs: Annotated[int, typer.Option(min=0, help="Solutions compiled in parallel; 0 = one per CPU core.")] = 0,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds before one build is killed.")] = 900.0,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Extension build cache. Default: ~/.cache/kbench/extensions.")] = None,
    problems_dir: ProblemsDir = Path("problems"),
    solutions_dir: SolutionsDir = Path("solutions"),
) -> None:
    """Compile and link solutions without running them (no GPU needed); exit 1 if any fails.

    CUDA solutions build on a machine without a GPU when a CUDA toolkit is found: kbench sets
    CUDA_HOME itself and, with no GPU to ask, TORCH_CUDA_ARCH_LIST=9.0 unless you set it.

    Examples:

      kbench build

      kbench build -p conv3d_gelu -s cuda_fused
    """
    from kbench.report import build_table
    from kbench.runner import build_only

    try:
        results = build_only(problem or [], solution, problems_dir, solutions_dir, cache_dir, jobs, timeout, _progress)
    except KbenchError as exc:
        raise _fail(exc) from None
    typer.echo(build_table(results))
    failed = [r for r in results if not r.ok]
    for r in failed:
        typer.echo(f"\n--- {r.solution.problem}/{r.solution.name}: {r.status} ---\n{r.compile.log[-3000:]}", err=True)
    if failed:
        raise typer.Exit(code=1)


def main() -> None:
    app()
