"""The kbench command line: parse options, call one library function, report errors on one line."""

from __future__ import annotations

import sys

from pathlib import Path
from typing import Annotated, Optional

import typer

from kbench import __version__
from kbench.errors import KbenchError, UsageError
from kbench.problems.discovery import locate

app = typer.Typer(
    name="kbench",
    help="Check that a hand-written kernel solution is correct, and time it against its PyTorch reference.",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

def _located(value: Path) -> Path:
    return locate(value)


ProblemsDir = Annotated[Path, typer.Option("--problems-dir", callback=_located, help="Folder of problems (one sub-folder each). Default: problems/ here or in the nearest parent folder that has one.")]
SolutionsDir = Annotated[Path, typer.Option("--solutions-dir", callback=_located, help="Folder of solutions (solutions/<problem>/<name>.py). Default: beside that problems/.")]
Precision = Annotated[Optional[str], typer.Option(help="fp32, fp16 or bf16: models and floating inputs of reference and solution cast to it, as KernelBench's --precision. Default: each problem's own (fp32 unless its problem.toml says).")]
ToleranceProfile = Annotated[str, typer.Option("--tolerance", help="Where atol/rtol come from: problem (problem.toml, else 1e-2; at least 1e-2 at fp16/bf16), kernelbench (KernelBench's current harness: 1e-4 at fp32, 1e-2 at fp16/bf16) or kernelbench-v0.1 (1e-2). --atol/--rtol win.")]


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
def list_command(
    check: Annotated[bool, typer.Option("--check", help="Also check each reference for degenerate outputs at its tolerance.")] = False,
    problem: Annotated[Optional[list[str]], typer.Option("--problem", "-p", help="With --check: only these problems.")] = None,
    device: Annotated[str, typer.Option(help="With --check: auto, cuda or cpu.")] = "auto",
    size: Annotated[Optional[str], typer.Option(help="With --check: full or small (default: full on CUDA, small on CPU).")] = None,
    timeout: Annotated[float, typer.Option(min=1, help="With --check: seconds per problem.")] = 600.0,
    precision: Annotated[Optional[list[str]], typer.Option(help="With --check: fp32, fp16 or bf16; repeat for several. Default: each problem's own.")] = None,
    tolerance: ToleranceProfile = "problem",
    no_tf32: Annotated[bool, typer.Option("--no-tf32", help="With --check: TF32 off for cuDNN and matmul.")] = False,
    problems_dir: ProblemsDir = Path("problems"),
    solutions_dir: SolutionsDir = Path("solutions"),
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
    from kbench.commands.listing import check_table, listing
    from kbench.commands.runner import check_problems

    try:
        typer.echo(listing(problems_dir, solutions_dir))
        if check:
            checks = check_problems(problem or [], problems_dir, device, size, timeout, _progress, precision or (),
                                    tolerance, tf32=not no_tf32)
            typer.echo("\n" + check_table(checks))
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
    tolerance: ToleranceProfile = "problem",
    precision: Precision = None,
    no_tf32: Annotated[bool, typer.Option("--no-tf32", help="Turn TF32 off for cuDNN (and matmul) in reference and solution alike.")] = False,
    no_compile_baseline: Annotated[bool, typer.Option("--no-compile-baseline", help="Skip timing the reference under torch.compile.")] = False,
    two_sizes: Annotated[Optional[bool], typer.Option("--two-sizes/--one-size", help="Also check correctness at the other size (full/small). Default: yes on CUDA, no on CPU.")] = None,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds before one child (build or evaluation) is killed.")] = 900.0,
    jobs: Annotated[int, typer.Option(min=0, help="Solutions compiled in parallel; 0 = one per CPU core.")] = 0,
    max_time: Annotated[float, typer.Option(min=0.01, help="Cap on timing seconds per evaluation.")] = 10.0,
    seed: Annotated[int, typer.Option(help="Seed for weights; trial i uses seed + 1 + i for inputs.")] = 42,
    executor: Annotated[str, typer.Option(help="local (one evaluation per visible GPU) or ray (Ray tasks, one GPU each).")] = "local",
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address (with --executor ray). Default: a local Ray instance.")] = None,
    parallel: Annotated[Optional[int], typer.Option(min=1, help="With --executor ray: evaluations at once. Default: the cluster's GPUs (CPU: 1).")] = None,
    kernel_profile: Annotated[bool, typer.Option("--kernel-profile/--no-kernel-profile", help="Profile each CUDA solution for the share of GPU time in its own kernels (the no_custom_kernel check). Off saves about 4 s per evaluation (the profiler's start-up).")] = True,
    resume: Annotated[Optional[str], typer.Option(help="Finish an earlier (e.g. interrupted) run: its id or folder. Its own settings apply; finished evaluations are kept.")] = None,
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

      kbench run --problems-dir ~/KernelBench/level1 --solutions-dir my_solutions/

      kbench run --resume 20261122-074644-be41

      kbench run -p conv3d_gelu --precision bf16 --tolerance kernelbench

      kbench run --executor ray --address ray://head:10001
    """
    from kbench.commands.runner import not_correct, run
    from kbench.reports.tables import results_frame, to_terminal
    from kbench.results.records import MathFlags, RunConfig, TimingPolicy

    config = RunConfig(
        device=device, size=size, trials=trials, atol=atol, rtol=rtol, tolerance=tolerance, precision=precision,
        math=MathFlags.from_tf32(not no_tf32),
        compile_baseline=not no_compile_baseline, two_sizes=two_sizes, timeout_s=timeout, jobs=jobs,
        timing=TimingPolicy(max_time_s=max_time), results_dir=results_dir, cache_dir=cache_dir, seed=seed,
        executor=executor, address=address, parallel=parallel, kernel_profile=kernel_profile,
    )
    try:
        store = run(config, problem or [], solution, problems_dir, solutions_dir, _progress, resume)
    except KbenchError as exc:
        raise _fail(exc) from None
    typer.echo(to_terminal(results_frame(store.evaluations)))
    typer.echo(f"\nresults: {store.directory}")
    failed = not_correct(store.evaluations)
    if failed:
        typer.echo(f"{len(failed)} of {len(store.evaluations)} row(s) not correct "
                   f"({', '.join(sorted({e.status.value for e in failed}))}): exit 1", err=True)
        raise typer.Exit(1)


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
    from kbench.commands.runner import build_only
    from kbench.reports.tables import build_table

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


@app.command("baseline")
def baseline_command(
    problem: Annotated[Optional[list[str]], typer.Option("--problem", "-p", help="Problem name or path; repeat for several. Default: all.")] = None,
    name: Annotated[Optional[str], typer.Option(help="Baseline name: results/baselines/<name>.json. Default: the GPU's name (and -fp16/-bf16 at those precisions).")] = None,
    device: Annotated[str, typer.Option(help="auto, cuda or cpu.")] = "auto",
    size: Annotated[Optional[str], typer.Option(help="full or small. Default: full on CUDA, small on CPU.")] = None,
    no_compile_baseline: Annotated[bool, typer.Option("--no-compile-baseline", help="Skip torch.compile.")] = False,
    precision: Precision = None,
    tolerance: ToleranceProfile = "problem",
    max_time: Annotated[float, typer.Option(min=0.01, help="Cap on timing seconds per problem.")] = 10.0,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds before one child is killed.")] = 900.0,
    results_dir: Annotated[Path, typer.Option(help="Where runs and baselines/ are written.")] = Path("results"),
    resume: Annotated[Optional[str], typer.Option(help="Finish an earlier (e.g. interrupted) baseline run: its id or folder. Its own settings and problems apply; finished references are kept.")] = None,
    problems_dir: ProblemsDir = Path("problems"),
) -> None:
    """Time only the references (eager and torch.compile) of a problem suite and store them as a baseline.

    Examples:

      kbench baseline

      kbench baseline --problems-dir ~/KernelBench/level1 --name level1-h100

      kbench baseline --problems-dir ~/KernelBench/level1 --name level1-h100 --resume 20261123-101500-ab12

      kbench baseline --problems-dir ~/KernelBench/level1 --precision bf16
    """
    from kbench.commands.runner import baseline
    from kbench.reports.tables import results_frame, to_terminal
    from kbench.results.records import RunConfig, TimingPolicy

    config = RunConfig(device=device, size=size, compile_baseline=not no_compile_baseline, timeout_s=timeout,
                       timing=TimingPolicy(max_time_s=max_time), results_dir=results_dir, precision=precision,
                       tolerance=tolerance)
    try:
        store, target = baseline(config, problem or [], problems_dir, name, _progress, resume)
    except KbenchError as exc:
        raise _fail(exc) from None
    typer.echo(to_terminal(results_frame(store.evaluations)))
    typer.echo(f"\nbaseline: {target}")


def _fraction(text: str) -> float:
    """'5%' or '0.05' as a fraction."""
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise typer.BadParameter(f"expected a percentage like 1% or a fraction like 0.01, got {text!r}") from None


@app.command("compare")
def compare_command(
    a: Annotated[Optional[str], typer.Argument(help="Before: a run id, run directory, run.json or baseline. Default: the run before the latest.")] = None,
    b: Annotated[Optional[str], typer.Argument(help="After: likewise. Default: the latest run.")] = None,
    baseline: Annotated[Optional[str], typer.Option(help="Compare against a stored baseline (name under results/baselines/ or a file) instead.")] = None,
    threshold: Annotated[str, typer.Option(help="Smallest change that counts (below it: same).")] = "1%",
    fmt: Annotated[str, typer.Option("--format", help="table, md, csv or json.")] = "table",
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="Exit 1 when a row is slower or newly failing.")] = False,
    ignore_env: Annotated[bool, typer.Option("--ignore-env", help="Compare runs from different GPUs or torch versions anyway.")] = False,
    results_dir: Annotated[Path, typer.Option(help="Where runs are stored.")] = Path("results"),
) -> None:
    """Did it get faster or slower for real? Compare two runs row by row.

    Each row's verdict comes from the raw samples of both runs (Mann-Whitney U test, p < 0.05) and a
    minimum effect (--threshold). Marks: + slower, - faster, ~ unclear, ! newly failing, x failing,
    * fixed, n new, r removed.

    Examples:

      kbench compare

      kbench compare 20261122-074644-be41 20261122-091500-a1b2 --format md

      kbench compare --baseline h100 --fail-on-regression
    """
    from kbench.reports.compare import compare
    from kbench.reports.tables import comparison_frame, FORMATS, render

    if fmt not in FORMATS:
        raise _fail(UsageError(f"Unknown format '{fmt}'. Use one of: {', '.join(FORMATS)}"))
    try:
        result = compare(a, b, baseline, results_dir, _fraction(threshold), ignore_env)
    except KbenchError as exc:
        raise _fail(exc) from None
    for warning in result.warnings:
        typer.secho(f"[warning] {warning}", err=True, fg=typer.colors.YELLOW)
    if fmt == "table":
        typer.echo(f"before: {result.before.label}\nafter:  {result.after.label}\n")
    typer.echo(render(comparison_frame(result.rows), fmt))
    if fail_on_regression and result.regressions:
        typer.secho(f"[error] {len(result.regressions)} regression(s)", err=True, fg=typer.colors.RED)
        raise typer.Exit(code=1)


@app.command("report")
def report_command(
    run: Annotated[Optional[str], typer.Argument(help="A run id, run directory or run.json. Default: the latest run.")] = None,
    no_chart: Annotated[bool, typer.Option("--no-chart", help="Skip the PNG chart.")] = False,
    format: Annotated[str, typer.Option("--format", help="markdown (report.md and the chart) or kernelbench (eval_results.json in KernelBench's field names).")] = "markdown",
    results_dir: Annotated[Path, typer.Option(help="Where runs are stored.")] = Path("results"),
) -> None:
    """Rank each problem's solutions and summarize the suite (fast_p, geometric-mean speedup).

    Writes report.md and speedups.png (needs matplotlib: pip install 'kbench[plot]') next to run.json; with
    --format kernelbench, eval_results.json as KernelBench's eval_from_generations.py writes it.

    Examples:

      kbench report

      kbench report 20261122-074644-be41 --no-chart

      kbench report --format kernelbench
    """
    from kbench.reports.leaderboard import write_kernelbench, write_report

    if format not in ("markdown", "kernelbench"):
        raise _fail(UsageError(f"Unknown report format '{format}'. Use markdown or kernelbench."))
    try:
        if format == "kernelbench":
            typer.echo(f"eval_results: {write_kernelbench(run, results_dir)}")
            return
        md_path, png, text = write_report(run, results_dir, with_chart=not no_chart)
    except KbenchError as exc:
        raise _fail(exc) from None
    typer.echo(text)
    typer.echo(f"report: {md_path}" + (f"\nchart:  {png}" if png else ("" if no_chart else "\nchart:  skipped (matplotlib is not installed; pip install 'kbench[plot]' draws it)")))


@app.command("import")
def import_command(
    responses: Annotated[Optional[list[Path]], typer.Argument(help="LLM response files (text, markdown or .py), or folders of them.", show_default=False)] = None,
    problem: Annotated[Optional[str], typer.Option("--problem", "-p", help="The problem the responses answer: a name under problems/ or a path.", show_default=False)] = None,
    name: Annotated[Optional[str], typer.Option("--name", "-n", help="Solution name; with several responses a prefix (NAME_1, NAME_2, ...). Default: from each response's file name.")] = None,
    kernelbench_run: Annotated[Optional[Path], typer.Option("--kernelbench-run", help="A KernelBench run folder (runs/<run_name>): each level_L_problem_P_sample_S_kernel.py becomes solutions/<problem P of level L>/sample_S.py.", show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite a solution of the same name instead of skipping or renaming.")] = False,
    problems_dir: ProblemsDir = Path("problems"),
    solutions_dir: SolutionsDir = Path("solutions"),
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
    from kbench.problems.importer import import_responses
    from kbench.problems.kernelbench_runs import import_run

    try:
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
    except KbenchError as exc:
        raise _fail(exc) from None
    for r in results:
        typer.echo(f"imported {r.source} -> {r.solution}" if r.ok else f"skipped {r.source}: {r.reason}")
    if not all(r.ok for r in results):
        raise typer.Exit(code=1)


@app.command("gate")
def gate_command(
    problem: Annotated[Optional[list[str]], typer.Option("--problem", "-p", help="Problem name or path; repeat for several. Default: all.")] = None,
    solution: Annotated[Optional[str], typer.Option("--solution", "-s", help="One solution (name or path). Default: all.")] = None,
    baseline: Annotated[Optional[str], typer.Option(help="GPU only: fail solutions slower than this baseline beyond noise.")] = None,
    max_regression: Annotated[str, typer.Option(help="Slowdown allowed against --baseline before a solution fails.")] = "5%",
    junit: Annotated[Optional[Path], typer.Option(help="Also write a JUnit XML report here.")] = None,
    trials: Annotated[int, typer.Option(min=1, help="Correctness trials per size.")] = 5,
    precision: Precision = None,
    tolerance: ToleranceProfile = "problem",
    max_time: Annotated[float, typer.Option(min=0.01, help="Cap on timing seconds per evaluation.")] = 10.0,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds before one child is killed.")] = 900.0,
    jobs: Annotated[int, typer.Option(min=0, help="Solutions compiled in parallel; 0 = one per CPU core.")] = 0,
    results_dir: Annotated[Path, typer.Option(help="Where the gate's runs are written.")] = Path("results"),
    cache_dir: Annotated[Optional[Path], typer.Option(help="Extension build cache.")] = None,
    problems_dir: ProblemsDir = Path("problems"),
    solutions_dir: SolutionsDir = Path("solutions"),
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
    """
    from kbench.commands.gate import FAIL, gate, PASS, SKIP, write_junit
    from kbench.results.records import RunConfig, TimingPolicy

    config = RunConfig(trials=trials, timeout_s=timeout, jobs=jobs, timing=TimingPolicy(max_time_s=max_time),
                       results_dir=results_dir, cache_dir=cache_dir, precision=precision, tolerance=tolerance)
    try:
        result = gate(problem or [], solution, problems_dir, solutions_dir, config, baseline, _fraction(max_regression), _progress)
        if junit is not None:
            write_junit(result, junit)
    except KbenchError as exc:
        raise _fail(exc) from None
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


def main() -> None:
    """The console entry point: every error, Typer's own validation included, is one `[error]` line."""
    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt:
        typer.secho("[error] interrupted", err=True, fg=typer.colors.RED)
        sys.exit(130)
    except Exception as exc:  # Typer's (click's) usage errors: a message and an exit code
        message, code = getattr(exc, "format_message", None), getattr(exc, "exit_code", None)
        if message is None or not isinstance(code, int):
            raise
        command = getattr(getattr(exc, "ctx", None), "command_path", "kbench")
        typer.secho(f"[error] {message()} (see `{command} --help`)", err=True, fg=typer.colors.RED)
        sys.exit(code)
    sys.exit(code if isinstance(code, int) else 0)
