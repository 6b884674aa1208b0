"""One evaluation, as the parent sees it: the job sent to a child, and its outcome turned into records."""

from __future__ import annotations

import dataclasses
from typing import TypedDict

from kbench.build.compile import BuildContext, BuildResult, child_env
from kbench.config.run_config import MathFlags, RunConfig, TimingPolicy
from kbench.execution.child import answer
from kbench.execution.executors import Executor, local_executor
from kbench.execution.pool import Slot
from kbench.judge.candidate.loading import load_failure
from kbench.judge.verdict import Verdict
from kbench.results.figures import Floor
from kbench.results.header import Environment
from kbench.results.records import (
    COMPILED,
    EAGER,
    CompileInfo,
    Evaluation,
    ProblemSpec,
    SolutionSpec,
    Status,
)
from kbench.wire.jobs import (
    EvaluateJob,
    OtherSize,
    ProblemRef,
    ReferenceJob,
    ReferenceResult,
    SolutionRef,
)


@dataclasses.dataclass(frozen=True)
class Plan:
    config: RunConfig
    device: str
    size: str
    env: Environment
    build: BuildContext
    executor: Executor = dataclasses.field(default_factory=lambda: local_executor("cpu", 0))


class JudgingFields(TypedDict):
    """The fields of kbench.wire.jobs.Judging, for the job records that extend it (`Job(**judging(...), ...)`)."""

    problem: ProblemRef
    device: str
    precision: str
    seed: int
    trials: int
    atol: float
    rtol: float
    math: MathFlags
    timing: TimingPolicy
    kernel_profile: bool
    backward: bool


class RowPlace(TypedDict):
    """Where an evaluation ran: the Evaluation fields every row of a problem shares in a run."""

    device: str
    size: str
    precision: str
    backward: bool


class ReferenceRowFields(RowPlace):
    """The Evaluation fields the eager and torch.compile rows of a problem share."""

    problem: str
    seconds: float


class SolutionRowFields(RowPlace):
    """The Evaluation fields a solution's row has whether or not it is judged."""

    problem: str
    solution: str
    compile: CompileInfo | None


def judging(plan: Plan, problem: ProblemSpec) -> JudgingFields:
    """What every job on `problem` shares in this run (the fields of kbench.wire.jobs.Judging)."""
    cfg = plan.config
    atol, rtol = cfg.tolerance_for(problem)
    return {"problem": ProblemRef(problem.name, str(problem.path), problem.overrides(plan.size)),
            "device": plan.device, "precision": cfg.precision_for(problem), "seed": cfg.seed, "trials": cfg.trials,
            "atol": atol, "rtol": rtol, "math": cfg.math, "timing": cfg.timing, "kernel_profile": cfg.kernel_profile,
            "backward": cfg.backward_for(problem)}


def other_sizes(plan: Plan, problem: ProblemSpec) -> tuple[OtherSize, ...]:
    """The further sizes at which a solution's correctness is checked (none if the problem has no small size)."""
    two = plan.config.two_sizes if plan.config.two_sizes is not None else plan.device == "cuda"
    if not two or not problem.has_small:
        return ()
    other = "small" if plan.size == "full" else "full"
    return (OtherSize(other, problem.overrides(other)),)


def evaluate_reference(plan: Plan, problem: ProblemSpec, slot: Slot = None) -> list[Evaluation]:
    """The eager row, and the torch.compile row unless it was switched off: filled by the reference's child,
    completed here with what was evaluated and where."""
    job = ReferenceJob(**judging(plan, problem), compile_baseline=plan.config.compile_baseline,
                       ceilings_dir=str(plan.build.cache_dir.parent / "ceilings"))
    outcome = plan.executor.launch(job, plan.config.timeout_s, plan.executor.env(child_env(plan.build, None, 1), slot))
    common: ReferenceRowFields = {"problem": problem.name, "device": plan.device, "size": plan.size,
                                  "seconds": outcome.seconds, "precision": plan.config.precision_for(problem),
                                  "backward": plan.config.backward_for(problem)}
    result = answer(outcome, ReferenceResult)
    if result.status != Status.CORRECT or not result.rows:
        return [Evaluation(solution=EAGER, status=Status(result.status), message=result.message, **common)]
    return [dataclasses.replace(row, **common) for row in result.rows]  # the child's rows, completed here


def _not_judged(plan: Plan, solution: SolutionSpec, precision: str,
                built: BuildResult | None) -> tuple[Status, str] | None:
    """Why a solution is not sent to a judge (its precisions, its devices, its build), or None when it is."""
    if precision not in solution.precisions:
        return Status.NOT_RUN, f"declares PRECISIONS {', '.join(solution.precisions)}; this run is in {precision}"
    if plan.device not in solution.devices:
        if built is not None and not built.ok:
            return _failed_build(built)
        reason = f"supports {', '.join(solution.devices)} only; this run is on {plan.device}"
        return Status.NOT_RUN, reason + (" (it compiled and linked)" if built is not None else "")
    if built is None or not built.ok:
        return _failed_build(built) if built else (Status.NOT_RUN, "not built")
    return None


def _failed_build(built: BuildResult) -> tuple[Status, str]:
    """A failed build's status: an import that failed on a kernel DSL missing here is not_run, as in the judge."""
    verdict = load_failure(Verdict(built.status, built.message))
    return Status(verdict.status), verdict.message


def evaluate_solution(plan: Plan, problem: ProblemSpec, solution: SolutionSpec, built: BuildResult | None,
                      compile_gain: float | None, floor: Floor | None = None, slot: Slot = None) -> Evaluation:
    """One solution in its own child, whose judge fills and decides its row (kbench.judge.verdict); `compile_gain`
    (eager's median over torch.compile's) and `floor` come from the problem's reference row. Here the row gets what
    was evaluated and where, the child's seconds, and the build's findings (the static checks': warnings that decide
    nothing) before the judge's."""
    precision = plan.config.precision_for(problem)
    common: SolutionRowFields = {"problem": problem.name, "solution": solution.name, "device": plan.device,
                                 "size": plan.size, "precision": precision,
                                 "compile": built.compile if built else None,
                                 "backward": plan.config.backward_for(problem)}
    if (refused := _not_judged(plan, solution, precision, built)) is not None:
        return Evaluation(status=refused[0], message=refused[1], **common)
    job = EvaluateJob(**judging(plan, problem), other_sizes=other_sizes(plan, problem),
                      solution=SolutionRef(solution.name, str(solution.path)), floor=floor, compile_gain=compile_gain)
    outcome = plan.executor.launch(job, plan.config.timeout_s,
                                   plan.executor.env(child_env(plan.build, solution, 1), slot))
    row = answer(outcome, Evaluation)  # the judge's row (or how its child ended), completed here
    assert built is not None  # _not_judged: a judged solution was built
    return dataclasses.replace(row, warnings=built.findings + row.warnings, seconds=outcome.seconds, **common)


def on_gpu(row: Evaluation, slot: Slot, plan: Plan | None = None) -> Evaluation:
    """Record which slot (a GPU index, or a Ray task slot) ran the evaluation when runs are spread out, and, for a
    GPU of this machine, its model (the probe's name for the slot's place among the visible GPUs)."""
    if slot is None:
        return row
    name = None
    if plan is not None and plan.executor.pins and slot in plan.executor.slots:
        gpu = plan.env.get("gpu")
        names = list(gpu.get("names") or []) if gpu else []
        index = plan.executor.slots.index(slot)
        name = names[index] if index < len(names) else None
    return dataclasses.replace(row, gpu=slot, gpu_name=name)


def with_next_step(row: Evaluation, timeout_s: float) -> Evaluation:
    """The row's message with what to do next, where there is something to do: the option that gives a slow solution
    more time, the command that shows a compiler's whole log, the one that reruns a failing solution alone."""
    alone = f"`kbench run -p {row.problem} -s {row.solution}`"
    hints = {
        Status.TIMEOUT: f"raise --timeout (now {timeout_s:g} s) if it needs longer, or look for a hang",
        Status.COMPILE_ERROR: f"`kbench build -p {row.problem} -s {row.solution}` prints the compiler's log "
                              "(also in run.json: compile.log)",
        Status.CRASHED: f"rerun it alone with {alone} to see all it printed",
        Status.RUNTIME_ERROR: f"rerun it alone with {alone}",
        Status.SUSPECT: "docs/timing.md says what the warning means",
    }
    hint = hints.get(row.status)
    if hint is None or row.solution in (EAGER, COMPILED) or not row.message or hint in row.message:
        return row
    return dataclasses.replace(row, message=f"{row.message} (next: {hint})")
