"""A run's evaluations: build its solutions, then each problem's reference and each solution on the executor's slots."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kbench.build.compile import build_all
from kbench.commands.evaluation import (
    Plan,
    RowPlace,
    evaluate_reference,
    evaluate_solution,
    on_gpu,
    with_next_step,
)
from kbench.commands.progress import (
    EvaluationFinished,
    Note,
    Planned,
    Progress,
    build_progress,
    build_started,
    evaluating,
    heartbeat,
)
from kbench.execution import isolation
from kbench.execution.pool import Slot, run_on_slots
from kbench.results.records import COMPILED, EAGER, Evaluation, ProblemSpec, SolutionSpec, Status
from kbench.results.storage import RunStore

UNRUNNABLE_HINT = "`kbench build` or `kbench gate` compiles it without a GPU"


def to_build(device: str, solutions: Sequence[SolutionSpec], cuda_home: Path | None,
             build_unrunnable: bool = False) -> tuple[list[SolutionSpec], dict[Path, str]]:
    """Which solutions to compile, and why the others are skipped: a solution this run cannot run is compiled only
    when asked (`build_unrunnable`, the GPU-less gate), so a first run on a laptop is about what can run."""
    chosen, skipped = [], {}
    for s in solutions:
        if s.defect:
            continue  # nothing to compile: its row is a load_error (see evaluate_all)
        runs_here = device in s.devices
        if runs_here or (build_unrunnable and "cuda" in s.devices and cuda_home is not None):
            chosen.append(s)
        elif build_unrunnable and "cuda" in s.devices:
            skipped[s.path] = "no CUDA toolkit found (set CUDA_HOME) and no GPU here; not built"
        elif "cuda" in s.devices and device == "cpu":
            skipped[s.path] = (f"supports {', '.join(s.devices)} only; this run is on cpu "
                               f"(not compiled: {UNRUNNABLE_HINT})")
        else:
            skipped[s.path] = f"supports {', '.join(s.devices)} only; this run is on {device}"
    return chosen, skipped


def is_done(store: RunStore, problem: str, solution: str) -> bool:
    return any(e.problem == problem and e.solution == solution for e in store.evaluations)


def _note_unrunnable(skipped: dict[Path, str], progress: Progress) -> None:
    """Say how many CUDA solutions this GPU-less run skips (to_build's reasons)."""
    unrunnable = sum(UNRUNNABLE_HINT in reason for reason in skipped.values())
    if unrunnable:
        hint = UNRUNNABLE_HINT.replace(" it ", " them ")
        progress(Note(f"skipping {unrunnable} CUDA solution(s): no GPU here ({hint})"))


def _slots(plan: Plan, progress: Progress) -> list[Slot]:
    """The executor's slots, said aloud when there are several (or the executor is not the local one)."""
    slots = list(plan.executor.slots)
    if len(slots) > 1 or plan.executor.name != "local":
        progress(Note(f"evaluating {len(slots)} at once ({plan.executor.name}; one evaluation per GPU): "
                      f"{', '.join(map(str, slots))}"))
    return slots


def evaluate_all(plan: Plan, problems: Sequence[ProblemSpec], solutions: dict[str, list[SolutionSpec]],
                 store: RunStore, cuda_home: Path | None, progress: Progress) -> None:
    """Build what is left to run, then the references (each problem's solutions need its floor and torch.compile
    gain), then the solutions; every row is stored as it comes."""
    every = [s for p in problems for s in solutions.get(p.name, []) if not is_done(store, p.name, s.name)]
    chosen, skipped = to_build(plan.device, every, cuda_home, plan.config.build_unrunnable)
    _note_unrunnable(skipped, progress)
    references = [p for p in problems if not is_done(store, p.name, EAGER)]
    pending = [(p, s) for p in problems for s in solutions.get(p.name, []) if not is_done(store, p.name, s.name)]
    progress(Planned(builds=len(chosen), evaluations=len(references) + len(pending)))
    if chosen:
        progress(Note(f"building {len(chosen)} solution(s) into {plan.build.cache_dir} ..."))

    local = plan.executor.name == "local"  # its workers are forked with everything imported
    with heartbeat(progress, f"building {len(chosen)} solution(s)", bool(chosen)):
        builds = build_all(plan.build, chosen, build_progress(progress),
                           plan.executor.launch if local else isolation.run_child, build_started(progress))
    slots = _slots(plan, progress)

    label = f"reference (eager{', torch.compile' if plan.config.compile_baseline else ''})"

    def reference(problem: ProblemSpec, slot: Slot) -> list[Evaluation]:
        store.begin(problem.name, EAGER)
        with evaluating(progress, problem.name, label, f"{problem.name}: reference"):
            rows = evaluate_reference(plan, problem, slot)
        return [on_gpu(row, slot, plan) for row in rows]

    def stored(problem: ProblemSpec, rows: list[Evaluation]) -> None:
        for row in rows:
            store.add(row)
        progress(EvaluationFinished(problem.name, label, tuple(r.status for r in rows), rows[0].message,
                                    reference=True))

    # Every executor's launcher releases a slot once its job has timed (kbench.execution.pool.Turn)
    run_on_slots(references, slots, reference, stored, early=True)
    rows_of = {p.name: [e for e in store.evaluations if e.problem == p.name and e.solution in (EAGER, COMPILED)]
               for p in problems}

    def solution_row(item: tuple[ProblemSpec, SolutionSpec], slot: Slot) -> Evaluation:
        problem, solution = item
        reference_rows = rows_of[problem.name]
        floor = reference_rows[0].floor if reference_rows else None
        gain = next((r.speedup_vs_eager for r in reference_rows if r.solution == COMPILED and r.speedup_vs_eager), None)
        where: RowPlace = {"device": plan.device, "size": plan.size, "precision": plan.config.precision_for(problem),
                           "backward": plan.config.backward_for(problem)}
        if solution.defect:
            return Evaluation(problem=problem.name, solution=solution.name, status=Status.LOAD_ERROR,
                              message=solution.defect, **where)
        if solution.path in skipped:
            return Evaluation(problem=problem.name, solution=solution.name, status=Status.NOT_RUN,
                              message=skipped[solution.path], **where)
        store.begin(problem.name, solution.name)  # a run that dies now is resumed with this row crashed
        with evaluating(progress, problem.name, solution.name, f"{problem.name}: {solution.name}"):
            row = evaluate_solution(plan, problem, solution, builds.get(solution.path), gain, floor, slot)
        return on_gpu(with_next_step(row, plan.config.timeout_s), slot, plan)

    def record(item: tuple[ProblemSpec, SolutionSpec], row: Evaluation) -> None:
        store.add(row)
        progress(EvaluationFinished(row.problem, row.solution, (row.status,), row.message))

    run_on_slots(pending, slots, solution_row, record, early=True)
