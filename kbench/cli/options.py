"""Every option more than one command takes, declared once; defaults come from RunConfig (kbench.config.run_config)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from kbench.config.run_config import MathFlags, RunConfig, TimingPolicy
from kbench.problems.discovery import locate

DEFAULT = RunConfig()  # the one place defaults live


def _located(value: Path) -> Path:
    return locate(value)


Problems = Annotated[list[str] | None, typer.Option("--problem", "-p", help="Problem name or path to a KernelBench-format .py file; repeat for several. Default: all.")]
Solutions = Annotated[list[str] | None, typer.Option("--solution", "-s", help="A solution: a name in solutions/<problem>/ or a path to a ModelNew file; repeat for several (with one --problem). Default: all of each problem's.")]
Device = Annotated[str, typer.Option(help="auto, cuda or cpu.")]
Size = Annotated[str | None, typer.Option(help="full or small. Default: full on CUDA, small on CPU.")]
Trials = Annotated[int, typer.Option(min=1, help="Correctness trials, each with fresh random inputs.")]
Precision = Annotated[str | None, typer.Option(help="fp32, fp16 or bf16: models and floating inputs of reference and solution cast to it, as KernelBench's --precision. Default: each problem's own (fp32 unless its problem.toml says).")]
ToleranceProfile = Annotated[str, typer.Option("--tolerance", help="Where atol/rtol come from: problem (problem.toml, else 1e-2; at least 1e-2 at fp16/bf16), kernelbench (KernelBench's current harness: 1e-4 at fp32, 1e-2 at fp16/bf16) or kernelbench-v0.1 (1e-2). --atol/--rtol win.")]
NoCompileBaseline = Annotated[bool, typer.Option("--no-compile-baseline", help="Skip timing the reference under torch.compile.")]
Timeout = Annotated[float, typer.Option(min=1, help="Seconds before one child (build or evaluation) is killed.")]
Jobs = Annotated[int, typer.Option(min=0, help="Solutions compiled in parallel; 0 = one per CPU core.")]
MaxTime = Annotated[float, typer.Option(min=0.01, help="Cap on timing seconds per evaluation.")]
Resume = Annotated[str | None, typer.Option(help="Finish an earlier (e.g. interrupted) run: its id or folder. Its own settings apply; finished work is kept; what was under way when its process died is recorded as crashed.")]
RetryCrashed = Annotated[bool, typer.Option("--retry-crashed", help="With --resume: run the run's crashed evaluations again (one may have ended the run).")]
ResultsDir = Annotated[Path, typer.Option(help="Where results/<run-id>/ (and baselines/) are written and read.")]
CacheDir = Annotated[Path | None, typer.Option(help="Extension build cache. Default: ~/.cache/kbench/extensions.")]
ProblemsDir = Annotated[Path, typer.Option("--problems-dir", callback=_located, help="Folder of problems (one sub-folder each). Default: problems/ here or in the nearest parent folder that has one.")]
SolutionsDir = Annotated[Path, typer.Option("--solutions-dir", callback=_located, help="Folder of solutions (solutions/<problem>/<name>.py). Default: beside that problems/.")]
Backward = Annotated[bool | None, typer.Option("--backward/--forward-only", help="Judge and time forward and backward as one call: input and parameter gradients for a fresh upstream gradient, each compared with the reference's. Default: each problem's own (problem.toml `backward = true`), else forward only.")]
ShowProgress = Annotated[bool | None, typer.Option("--progress/--no-progress", help="Live progress on stderr: bars with counts and ETA, what runs now, a tally of statuses. Default: on when stderr is a terminal (not TERM=dumb); otherwise plain lines, as in a log.")]

PROBLEMS_DIR, SOLUTIONS_DIR = Path("problems"), Path("solutions")

# The settings run, baseline and gate all take, each declared once: name -> (its option, its default). `with_settings`
# adds them to a command's signature, so no command repeats the list.
RUN_SETTINGS: dict[str, tuple[object, object]] = {
    "precision": (Precision, DEFAULT.precision),
    "tolerance": (ToleranceProfile, DEFAULT.tolerance),
    "backward": (Backward, DEFAULT.backward),
    "max_time": (MaxTime, DEFAULT.timing.max_time_s),
    "timeout": (Timeout, DEFAULT.timeout_s),
    "results_dir": (ResultsDir, DEFAULT.results_dir),
}
F = TypeVar("F", bound=Callable[..., Any])


def with_settings(func: F) -> F:
    """`func` (which takes **settings) with RUN_SETTINGS's options added to the signature Typer reads, after its own."""
    signature = inspect.signature(func, eval_str=True)  # the options themselves, not their names as strings
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=option)
             for name, (option, default) in RUN_SETTINGS.items()]
    func.__signature__ = signature.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
    return func


def run_config(*, no_tf32: bool = False, no_compile_baseline: bool = False, max_time: float = DEFAULT.timing.max_time_s,
               timeout: float = DEFAULT.timeout_s, **fields: Any) -> RunConfig:
    """The RunConfig of run, baseline and gate from their options: what the CLI names differently is mapped here
    (--no-tf32, --no-compile-baseline, --max-time, --timeout); every other option is a RunConfig field of its name."""
    return RunConfig(math=MathFlags.from_tf32(not no_tf32), compile_baseline=not no_compile_baseline,
                     timing=TimingPolicy(max_time_s=max_time), timeout_s=timeout, **fields)


def fraction(text: str) -> float:
    """'5%' or '0.05' as a fraction."""
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise typer.BadParameter(f"expected a percentage like 1% or a fraction like 0.01, got {text!r}") from None
