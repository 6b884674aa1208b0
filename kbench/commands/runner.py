"""The run: probe the machine, build solutions, evaluate each problem and solution, store as it goes."""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kbench.build.compile import build_all, BuildContext, BuildResult, zygote_env
from kbench.errors import Interrupted, KbenchError, UsageError
from kbench.execution import isolation
from kbench.system import toolkit
from kbench.system.environment import git_info, host_info
from kbench.commands.evaluation import (
    Plan, base_job, evaluate_reference, evaluate_solution, on_gpu, with_floor, with_next_step, with_suspicion,
)
from kbench.execution.executors import make_executor
from kbench.execution.pool import run_on_slots, Slot
from kbench.results.records import (
    COMPILED, EAGER, PRECISIONS, TOLERANCE_PROFILES, Evaluation, MathFlags, ProblemSpec, RunConfig, SolutionSpec,
    Status,
)
from kbench.execution.zygote import Zygote
from kbench.reports.tables import write_tables
from kbench.results.storage import RunStore

Progress = Callable[[str], None]
PROBE_TIMEOUT_S = 120


def probe_environment(zygote: Zygote | None = None) -> dict[str, Any]:
    """The machine as a worker sees it (torch, GPUs); from a worker forked by `zygote` when one is given."""
    env = zygote_env(toolkit.find_cuda_home()) if zygote is not None else isolation.worker_path_env()
    outcome = isolation.run_forked(zygote, {"mode": "probe"}, PROBE_TIMEOUT_S, env)
    if outcome.result is None or "environment" not in outcome.result:
        status, message = outcome.failure or ("crashed", outcome.result.get("message", "") if outcome.result else "")
        raise KbenchError(f"Cannot start a kbench worker ({status}: {message}). Is torch installed in this Python?")
    return outcome.result["environment"]


def resolve_device(requested: str, env: dict[str, Any]) -> str:
    if requested not in ("auto", "cuda", "cpu"):
        raise UsageError(f"Unknown device '{requested}'. Use auto, cuda or cpu.")
    if requested == "cuda" and not env.get("gpu"):
        raise UsageError("--device cuda was asked for, but torch sees no GPU here. Use --device cpu or auto.")
    if requested == "auto":
        return "cuda" if env.get("gpu") else "cpu"
    return requested


def resolve_size(requested: str | None, device: str) -> str:
    size = requested or ("full" if device == "cuda" else "small")
    if size not in ("full", "small"):
        raise UsageError(f"Unknown size '{size}'. Use full or small.")
    return size


HEARTBEAT_S = 9.0  # on long work, a line at least this often, so that a run never looks stuck


@contextmanager
def heartbeat(progress: Progress, label: str, on: bool = True) -> Iterator[None]:
    """While the body runs, `  ... <label>: still running (N s)` every HEARTBEAT_S seconds."""
    if not on:
        yield
        return
    done, start = threading.Event(), time.monotonic()

    def beat() -> None:
        while not done.wait(HEARTBEAT_S):
            progress(f"  ... {label}: still running ({time.monotonic() - start:.0f} s)")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


UNRUNNABLE_HINT = "`kbench build` or `kbench gate` compiles it without a GPU"


def _to_build(device: str, solutions: Sequence[SolutionSpec], cuda_home: Path | None,
              build_unrunnable: bool = False) -> tuple[list[SolutionSpec], dict[Path, str]]:
    """Which solutions to compile, and why the others are skipped: a solution this run cannot run is compiled only
    when asked (`build_unrunnable`, the GPU-less gate), so a first run on a laptop is about what can run."""
    chosen, skipped = [], {}
    for s in solutions:
        if s.defect:
            continue  # nothing to compile: its row is a load_error (see _run_all)
        runs_here = device in s.devices
        if runs_here or (build_unrunnable and "cuda" in s.devices and cuda_home is not None):
            chosen.append(s)
        elif build_unrunnable and "cuda" in s.devices:
            skipped[s.path] = "no CUDA toolkit found (set CUDA_HOME) and no GPU here; not built"
        elif "cuda" in s.devices and device == "cpu":
            skipped[s.path] = f"supports {', '.join(s.devices)} only; this run is on cpu (not compiled: {UNRUNNABLE_HINT})"
        else:
            skipped[s.path] = f"supports {', '.join(s.devices)} only; this run is on {device}"
    return chosen, skipped


def build_context(env: dict[str, Any], cache_dir: Path | None, timeout_s: float, jobs: int) -> BuildContext:
    """Where and how solutions compile on this machine: toolkit, arch list (from the GPU), cache."""
    gpu = env.get("gpu") or {}
    arch = toolkit.arch_list(tuple(gpu["capability"]) if gpu else None)
    return BuildContext(cache_dir or toolkit.default_cache_dir(), toolkit.find_cuda_home(), arch, env["torch"], timeout_s, jobs)


def build_progress(progress: Progress) -> Callable[[BuildResult, int, int], None]:
    def on_built(result: BuildResult, done: int, total: int) -> None:
        state = "cached" if result.compile.cached else ("ok" if result.ok else f"{result.status}: {result.message}")
        progress(f"  [build {done}/{total}] {result.solution.problem}/{result.solution.name}: {state} ({result.compile.seconds:.1f} s)")

    return on_built


def execute(config: RunConfig, problems: Sequence[ProblemSpec], solutions: dict[str, list[SolutionSpec]],
            repo: Path, progress: Progress = lambda _: None, broken: Sequence[tuple[str, str]] = (),
            resume: Path | None = None, env: dict[str, Any] | None = None,
            selection: dict[str, Any] | None = None) -> RunStore:
    """Run every problem and its solutions; results are saved after each evaluation.

    `broken` problem files (name, reason) get a failed record each and the run goes on. With `resume`,
    an earlier run's directory is reopened with its own configuration, and evaluations it already
    holds are not run again. `env` is the machine's probe, when the caller has it already. `selection`
    (what was asked for) is stored so that a resume finishes the same problems and solutions.
    """
    if config.tolerance not in TOLERANCE_PROFILES:
        raise UsageError(f"Unknown tolerance profile '{config.tolerance}'. Use one of: {', '.join(TOLERANCE_PROFILES)}")
    if config.precision is not None and config.precision not in PRECISIONS:
        raise UsageError(f"Unknown precision '{config.precision}'. Use one of: {', '.join(PRECISIONS)}")
    early = None
    if env is None:
        progress("probing the machine ...")
        # The run's zygote starts now (its imports overlap the probe) and forks the probe's worker.
        early = Zygote(zygote_env(toolkit.find_cuda_home())) if config.executor == "local" else None
        try:
            env = probe_environment(early)
        except BaseException:
            if early is not None:
                early.close()
            raise
    resumed = RunStore.resume(resume) if resume is not None else None
    if resumed is not None:
        config = _resumable_config(resumed, env)
    device = resolve_device(config.device, env)
    size = resolve_size(config.size, device)
    gpu = env.get("gpu") or {}
    ctx = build_context(env, config.cache_dir, config.timeout_s, config.jobs)
    cuda_home, arch = ctx.cuda_home, ctx.arch
    try:
        executor = make_executor(config.executor, device, gpu.get("count", 0), config.address, config.parallel, early)
    except BaseException:
        if early is not None:
            early.close()
        raise
    plan = Plan(config, device, size, env, ctx, executor)
    header = {
        "environment": {**env, "cuda_home": str(cuda_home) if cuda_home else None, "arch_list": arch, **host_info()},
        "git": git_info(repo),
        "config": {**dataclasses.asdict(config), "device": device, "size": size},
        "selection": selection,
        "problems": {p.name: {"origin": p.origin, "path": str(p.path),
                              **dict(zip(("atol", "rtol"), config.tolerance_for(p))),  # what its comparisons used
                              "precision": config.precision_for(p),
                              "problem_atol": p.atol, "problem_rtol": p.rtol,
                              "constants": dict(p.constants), "overrides": p.overrides(size)} for p in problems},
    }
    if resumed is not None:
        store = resumed
        store.header["problems"] = {**store.header.get("problems", {}), **header["problems"]}
        store.save("running")
    else:
        store = RunStore.create(config.results_dir, header)
    machine = gpu.get("name", env["cpu"]) if device == "cuda" else env["cpu"]
    progress(f"run {store.run_id}: {len(problems)} problem(s) on {device} ({machine}), size {size}")
    with _sigterm_as_interrupt():
        try:
            for name, reason in broken:
                if not _done(store, name, EAGER):
                    store.add(Evaluation(problem=name, solution=EAGER, status=Status.LOAD_ERROR, message=reason,
                                         device=device, size=size, precision=config.precision or "fp32"))
            try:
                _run_all(plan, problems, solutions, store, cuda_home, progress)
            finally:
                executor.close()
        except KeyboardInterrupt:
            isolation.kill_all()
            store.finish("interrupted")
            write_tables(store)
            raise Interrupted(f"Interrupted; {len(store.evaluations)} finished evaluation(s) are saved in {store.directory}") from None
    store.finish("complete")
    write_tables(store)
    return store


PASSING = (Status.CORRECT, Status.NOT_RUN)


def not_correct(evaluations: Sequence[Evaluation]) -> list[Evaluation]:
    """The rows that make `kbench run` exit 1: every status but correct and not_run (a row this machine cannot run,
    such as a CUDA solution without a GPU, says so without failing the run)."""
    return [e for e in evaluations if e.status not in PASSING]


def _resumable_config(store: RunStore, env: dict[str, Any]) -> RunConfig:
    """The resumed run's own configuration; resuming on another kind of machine would mix timings."""
    stored = store.header.get("environment", {})
    here, there = (env.get("gpu") or {}).get("name"), (stored.get("gpu") or {}).get("name")
    if here != there or env.get("torch") != stored.get("torch"):
        raise UsageError(f"Run {store.run_id} was measured on {there or 'CPU'} with torch {stored.get('torch')}; "
                         f"this machine has {here or 'no GPU'} with torch {env.get('torch')}. Start a new run instead.")
    return RunConfig.from_json(store.header["config"])


def _done(store: RunStore, problem: str, solution: str) -> bool:
    return any(e.problem == problem and e.solution == solution for e in store.evaluations)


def _run_all(plan: Plan, problems: Sequence[ProblemSpec], solutions: dict[str, list[SolutionSpec]],
             store: RunStore, cuda_home: Path | None, progress: Progress) -> None:
    every = [s for p in problems for s in solutions.get(p.name, []) if not _done(store, p.name, s.name)]
    chosen, skipped = _to_build(plan.device, every, cuda_home, plan.config.build_unrunnable)
    unrunnable = sum(UNRUNNABLE_HINT in reason for reason in skipped.values())
    if unrunnable:
        progress(f"skipping {unrunnable} CUDA solution(s): no GPU here ({UNRUNNABLE_HINT.replace(' it ', ' them ')})")
    if chosen:
        progress(f"building {len(chosen)} solution(s) into {plan.build.cache_dir} ...")

    local = plan.executor.name == "local"  # its workers are forked with everything imported
    with heartbeat(progress, f"building {len(chosen)} solution(s)", bool(chosen)):
        builds = build_all(plan.build, chosen, build_progress(progress), plan.executor.launch if local else isolation.run_child)
    slots = list(plan.executor.slots)
    if len(slots) > 1 or plan.executor.name != "local":
        progress(f"evaluating {len(slots)} at once ({plan.executor.name}; one evaluation per GPU): {', '.join(map(str, slots))}")

    # References first: each problem's solutions need its floor and torch.compile gain.
    def reference(problem: ProblemSpec, slot: Slot) -> list[Evaluation]:
        progress(f"{problem.name}: reference (eager{', torch.compile' if plan.config.compile_baseline else ''}) ...")
        with heartbeat(progress, f"{problem.name}: reference"):
            rows = evaluate_reference(plan, problem, slot)
        return [on_gpu(with_floor(row, rows[0].extra.get("floor")), slot) for row in rows]

    run_on_slots([p for p in problems if not _done(store, p.name, EAGER)], slots, reference,
                 lambda _, rows: [store.add(row) for row in rows])
    rows_of = {p.name: [e for e in store.evaluations if e.problem == p.name and e.solution in (EAGER, COMPILED)] for p in problems}

    def solution_row(item: tuple[ProblemSpec, SolutionSpec], slot: Slot) -> Evaluation:
        problem, solution = item
        reference_rows = rows_of[problem.name]
        floor = reference_rows[0].extra.get("floor") if reference_rows else None
        gain = next((r.speedup_vs_eager for r in reference_rows if r.solution == COMPILED and r.speedup_vs_eager), None)
        where = {"device": plan.device, "size": plan.size, "precision": plan.config.precision_for(problem)}
        if solution.defect:
            return Evaluation(problem=problem.name, solution=solution.name, status=Status.LOAD_ERROR,
                              message=solution.defect, **where)
        if solution.path in skipped:
            return Evaluation(problem=problem.name, solution=solution.name, status=Status.NOT_RUN,
                              message=skipped[solution.path], **where)
        progress(f"{problem.name}: {solution.name} ...")
        with heartbeat(progress, f"{problem.name}: {solution.name}"):
            row = with_floor(evaluate_solution(plan, problem, solution, builds.get(solution.path), gain, slot), floor)
        return on_gpu(with_next_step(with_suspicion(row), plan.config.timeout_s), slot)

    def record(item: tuple[ProblemSpec, SolutionSpec], row: Evaluation) -> None:
        progress(f"  {row.problem}/{row.solution}: {row.status.value}{' - ' + row.message if row.message else ''}")
        store.add(row)

    pending = [(p, s) for p in problems for s in solutions.get(p.name, []) if not _done(store, p.name, s.name)]
    run_on_slots(pending, slots, solution_row, record)


def run(config: RunConfig, problem_refs: Sequence[str], solution_ref: str | None, problems_dir: Path,
        solutions_dir: Path, progress: Progress = lambda _: None, resume: str | None = None) -> RunStore:
    """`kbench run`: select problems and solutions, then execute them (or finish an earlier run).

    With no problem named, every problem under problems_dir runs, and a file there that breaks the
    contract fails alone, as a load_error record.
    """
    from kbench.problems.discovery import choose_problems, find_solutions, select
    from kbench.results.storage import resolve

    previous = resolve(resume, config.results_dir) if resume else None
    problem_refs, solution_ref, problems_dir, solutions_dir, selection = _selection(
        previous, problem_refs, solution_ref, problems_dir, solutions_dir)
    if problem_refs or solution_ref is not None:
        (problems, solutions), broken = select(problem_refs, solution_ref, problems_dir, solutions_dir), []
    else:
        problems, broken = choose_problems([], problems_dir)
        solutions = {p.name: find_solutions(p, None, solutions_dir) for p in problems}
    return execute(config, problems, solutions, Path.cwd(), progress, broken, previous, selection=selection)


def _selection(previous: Path | None, problem_refs: Sequence[str], solution_ref: str | None, problems_dir: Path,
               solutions_dir: Path) -> tuple[Sequence[str], str | None, Path, Path, dict[str, Any]]:
    """What to run, and the record of it that a run keeps: a resumed run's own selection (it records what was asked
    for), else the one given."""
    from kbench.results.storage import load_run

    stored = load_run(previous)[0].get("selection") if previous is not None else None
    if stored:
        if problem_refs or solution_ref is not None:
            raise UsageError("--resume finishes the run's own problems and solutions; leave out -p/--problem and -s/--solution.")
        problem_refs, solution_ref = stored["problems"], stored["solution"]
        problems_dir, solutions_dir = Path(stored["problems_dir"]), Path(stored["solutions_dir"])
    selection = {"problems": [_as_ref(r) for r in problem_refs], "solution": _as_ref(solution_ref) if solution_ref else None,
                 "problems_dir": str(problems_dir.resolve()), "solutions_dir": str(solutions_dir.resolve())}
    return problem_refs, solution_ref, problems_dir, solutions_dir, selection


def _as_ref(ref: str) -> str:
    """A problem or solution reference as stored: a path becomes absolute, a name stays a name."""
    from kbench.problems.discovery import is_path_ref

    return str(Path(ref).resolve()) if is_path_ref(ref) else ref


def baseline(config: RunConfig, problem_refs: Sequence[str], problems_dir: Path, name: str | None,
             progress: Progress = lambda _: None, resume: str | None = None) -> tuple[RunStore, Path]:
    """`kbench baseline`: time only the references (eager and torch.compile) and store the run as a baseline.

    With `resume` (an interrupted baseline run), only the problems it does not hold yet are timed."""
    import re
    import shutil

    from kbench.problems.discovery import choose_problems
    from kbench.results.storage import BASELINES, resolve, RUN_FILE

    previous = resolve(resume, config.results_dir) if resume else None
    problem_refs, _, problems_dir, _, selection = _selection(previous, problem_refs, None, problems_dir, problems_dir)
    problems, broken = choose_problems(problem_refs, problems_dir)
    store = execute(config, problems, {}, Path.cwd(), progress, broken, previous, selection=selection)
    env = store.header["environment"]
    label = name or ((env.get("gpu") or {}).get("name") or "cpu") + (
        f"-{config.precision}" if config.precision not in (None, "fp32") else "")
    target = config.results_dir / BASELINES / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', label).strip('-').lower()}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(store.directory / RUN_FILE, target)
    return store, target


def build_only(problem_refs: Sequence[str], solution_ref: str | None, problems_dir: Path, solutions_dir: Path,
               cache_dir: Path | None, jobs: int, timeout_s: float, progress: Progress = lambda _: None) -> list[BuildResult]:
    """`kbench build`: compile and link the selected solutions (any device's) without running them."""
    from kbench.problems.discovery import select

    _, solutions = select(problem_refs, solution_ref, problems_dir, solutions_dir)
    chosen = [s for group in solutions.values() for s in group]
    if not chosen:
        raise UsageError("No solutions selected, so nothing to build.")
    ctx = build_context(probe_environment(), cache_dir, timeout_s, jobs)
    needs_cuda = [s for s in chosen if "cuda" in s.devices]
    if needs_cuda and ctx.cuda_home is None:
        names = ", ".join(f"{s.problem}/{s.name}" for s in needs_cuda)
        raise KbenchError(f"No CUDA toolkit found for {names}. Set CUDA_HOME to the toolkit's folder.")
    progress(f"building {len(chosen)} solution(s) for arch {ctx.arch} (CUDA toolkit: {ctx.cuda_home or 'none'}) into {ctx.cache_dir} ...")
    results = build_all(ctx, chosen, build_progress(progress))
    return [results[s.path] for s in chosen]


@dataclasses.dataclass(frozen=True)
class ProblemCheck:
    problem: ProblemSpec
    size: str
    findings: tuple[str, ...]
    figures: dict[str, Any]
    error: str = ""
    precision: str = "fp32"


def check_problems(problem_refs: Sequence[str], problems_dir: Path, device: str, size: str | None,
                   timeout_s: float, progress: Progress = lambda _: None, precisions: Sequence[str] = (),
                   profile: str = "problem", tf32: bool = True) -> list[ProblemCheck]:
    """`kbench list --check`: each reference's degenerate-output and noise checks, per precision (default: the
    problem's own), each in its own child."""
    from kbench.problems.discovery import find_problem, list_problems

    bad = [p for p in precisions if p not in PRECISIONS] + ([profile] if profile not in TOLERANCE_PROFILES else [])
    if bad:
        raise UsageError(f"Unknown precision or tolerance profile {', '.join(bad)}: precisions are "
                         f"{', '.join(PRECISIONS)}, profiles {', '.join(TOLERANCE_PROFILES)}")
    problems = [find_problem(r, problems_dir) for r in problem_refs] if problem_refs else list_problems(problems_dir)
    env = probe_environment()
    device = resolve_device(device, env)
    size = resolve_size(size, device)
    checks = []
    for problem in problems:
        for precision in precisions or (problem.precision,):
            config = RunConfig(device=device, precision=precision, tolerance=profile, math=MathFlags.from_tf32(tf32))
            plan = Plan(config, device, size, env, None)  # type: ignore[arg-type]
            progress(f"checking {problem.name} ({device}, {size}, {precision}) ...")
            outcome = isolation.run_child({**base_job(plan, problem), "mode": "check"}, timeout_s,
                                          isolation.worker_path_env())
            result = outcome.result or {}
            error = "" if result.get("status") == "correct" else (
                result.get("message") or (outcome.failure or ("", "no result"))[1])
            checks.append(ProblemCheck(problem, size, tuple(result.get("findings", ())), result.get("figures", {}),
                                       error, precision))
    return checks
