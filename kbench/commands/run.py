"""`kbench run` and its resume: choose the problems and solutions, keep that choice in the run, execute it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kbench.commands.execute import execute
from kbench.commands.progress import Progress
from kbench.config.run_config import RunConfig
from kbench.errors import UsageError
from kbench.problems.discovery import choose_problems, find_solutions, is_path_ref, select
from kbench.results.header import Selection, selected_solutions
from kbench.results.records import Evaluation, Status
from kbench.results.storage import RunStore, load_run, resolve

PASSING = (Status.CORRECT, Status.NOT_RUN)


def not_correct(evaluations: Sequence[Evaluation]) -> list[Evaluation]:
    """The rows that make `kbench run` exit 1: every status but correct and not_run (a row this machine cannot run,
    such as a CUDA solution without a GPU, says so without failing the run)."""
    return [e for e in evaluations if e.status not in PASSING]


def run(config: RunConfig, problem_refs: Sequence[str], solution_refs: Sequence[str], problems_dir: Path,
        solutions_dir: Path, progress: Progress = lambda _: None, resume: str | None = None,
        retry_crashed: bool = False) -> RunStore:
    """`kbench run`: select problems and solutions, then execute them (or finish an earlier run).

    Args:
        config: the run's settings (device, size, timing policy, tolerances, folders).
        problem_refs: problem names or paths (-p); empty: every problem under problems_dir.
        solution_refs: solutions' names or paths (-s, repeatable); empty: every solution of each problem.
        problems_dir, solutions_dir: where problems and their solutions are found.
        progress: called with each progress event (kbench.commands.progress).
        resume: a run to finish (an id or path): what it asked for, less the rows it has.
        retry_crashed: with `resume`, run the rows it recorded as crashed again.

    Returns:
        The RunStore of the run, complete (its run.json written). With no problem named, a file under problems_dir
        that breaks the contract fails alone, as a load_error record.

    Raises:
        UsageError: --retry-crashed without --resume; ResultsError, ProblemError: what cannot be found or read.
    """
    previous = resolve(resume, config.results_dir) if resume else None
    problem_refs, solution_refs, problems_dir, solutions_dir, selection = what_to_run(
        previous, problem_refs, solution_refs, problems_dir, solutions_dir)
    broken: list[tuple[str, str]]
    if problem_refs or solution_refs:
        (problems, solutions), broken = select(problem_refs, solution_refs, problems_dir, solutions_dir), []
    else:
        problems, broken = choose_problems([], problems_dir)
        solutions = {p.name: find_solutions(p, [], solutions_dir) for p in problems}
    if retry_crashed and previous is None:
        raise UsageError("--retry-crashed reruns the crashed evaluations of a resumed run: give --resume RUN too.")
    return execute(config, problems, solutions, Path.cwd(), progress, broken, previous, selection=selection,
                   retry_crashed=retry_crashed)


def what_to_run(previous: Path | None, problem_refs: Sequence[str], solution_refs: Sequence[str], problems_dir: Path,
               solutions_dir: Path) -> tuple[Sequence[str], Sequence[str], Path, Path, Selection]:
    """What to run, and the record of it that a run keeps: a resumed run's own selection (it records what was asked
    for), else the one given."""
    stored = load_run(previous)[0].get("selection") if previous is not None else None
    if stored:
        if problem_refs or solution_refs:
            raise UsageError("--resume finishes the run's own problems and solutions; "
                             "leave out -p/--problem and -s/--solution.")
        problem_refs, solution_refs = stored["problems"], selected_solutions(stored)
        problems_dir, solutions_dir = Path(stored["problems_dir"]), Path(stored["solutions_dir"])
    selection = selection_of(problem_refs, solution_refs, problems_dir, solutions_dir)
    return problem_refs, solution_refs, problems_dir, solutions_dir, selection


def selection_of(problem_refs: Sequence[str], solution_refs: Sequence[str], problems_dir: Path,
                 solutions_dir: Path) -> Selection:
    """The record of what a run (or a profile) was asked for, as its run file keeps it."""
    return {"problems": [as_ref(r) for r in problem_refs], "solutions": [as_ref(r) for r in solution_refs],
            "problems_dir": str(problems_dir.resolve()), "solutions_dir": str(solutions_dir.resolve())}



def as_ref(ref: str) -> str:
    """A problem or solution reference as stored: a path becomes absolute, a name stays a name."""
    return str(Path(ref).resolve()) if is_path_ref(ref) else ref
