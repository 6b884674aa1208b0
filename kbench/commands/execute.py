"""One run from the machine's probe to its stored results: open (or reopen) the run, evaluate, finish or interrupt."""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from kbench.build.compile import zygote_env
from kbench.commands.evaluate_all import evaluate_all, is_done
from kbench.commands.evaluation import Plan
from kbench.commands.machine import build_context, probe_environment, resolve_device, resolve_size
from kbench.commands.progress import Note, Progress
from kbench.config.run_config import RunConfig
from kbench.config.tolerances import PRECISIONS, TOLERANCE_PROFILES
from kbench.errors import Interrupted, UsageError
from kbench.execution import process_tree
from kbench.execution.executor import Executor
from kbench.execution.executors import make_executor
from kbench.execution.zygote import Zygote
from kbench.reports.compare import machine_key
from kbench.reports.tables import write_tables
from kbench.results.header import Environment, GpuInfo, ProblemRecord, RunHeader, Selection
from kbench.results.records import EAGER, Evaluation, ProblemSpec, SolutionSpec, Status
from kbench.results.storage import RunStore
from kbench.system import cores, toolkit
from kbench.system.environment import git_info, host_info


def execute(config: RunConfig, problems: Sequence[ProblemSpec], solutions: dict[str, list[SolutionSpec]],
            repo: Path, progress: Progress = lambda _: None, broken: Sequence[tuple[str, str]] = (),
            resume: Path | None = None, env: Environment | None = None,
            selection: Selection | None = None, retry_crashed: bool = False) -> RunStore:
    """Run every problem and its solutions; results are saved after each evaluation.

    `broken` problem files (name, reason) get a failed record each and the run goes on. With `resume`,
    an earlier run's directory is reopened with its own configuration, and evaluations it already
    holds are not run again; what the earlier run was evaluating when its process died is recorded as `crashed`
    (it may have been what ended the run), and crashed rows run again only with `retry_crashed`. `env` is the
    machine's probe, when the caller has it already. `selection` (what was asked for) is stored so that a resume
    finishes the same problems and solutions.
    """
    _check_profiles(config)
    early = None
    if env is None:
        env, early = _probe(config, progress)
    resumed = RunStore.resume(resume) if resume is not None else None
    if resumed is not None:
        config = _resumable_config(resumed, env)
    device = resolve_device(config.device, env)
    size = resolve_size(config.size, device)
    gpu = env.get("gpu")
    ctx = build_context(env, config.cache_dir, config.timeout_s, config.jobs)
    plan = Plan(config, device, size, env, ctx, _executor(config, device, gpu, early))
    store = _open_store(plan, resumed, _header(plan, repo, problems, selection))
    if resumed is not None:
        _settle_lost(plan, store, problems, retry_crashed, progress)
    machine = gpu["name"] if device == "cuda" and gpu else env["cpu"]
    progress(Note(f"run {store.run_id}: {len(problems)} problem(s) on {device} ({machine}), size {size}"))
    if plan.executor.cores is not None:
        progress(Note(plan.executor.cores.describe()))
    with cores.untimed_here(plan.executor.cores):  # this process, too, off the timing cores while the run times
        _evaluate(plan, problems, solutions, broken, store, progress)
    store.finish("complete")
    write_tables(store)
    return store


def _check_profiles(config: RunConfig) -> None:
    if config.tolerance not in TOLERANCE_PROFILES:
        raise UsageError(f"Unknown tolerance profile '{config.tolerance}'. Use one of: {', '.join(TOLERANCE_PROFILES)}")
    if config.precision is not None and config.precision not in PRECISIONS:
        raise UsageError(f"Unknown precision '{config.precision}'. Use one of: {', '.join(PRECISIONS)}")


def _probe(config: RunConfig, progress: Progress) -> tuple[Environment, Zygote | None]:
    """The machine's probe, and the run's zygote (local executor): it starts now (its imports overlap the probe)
    and forks the probe's worker."""
    progress(Note("probing the machine ..."))
    early = Zygote(zygote_env(toolkit.find_cuda_home())) if config.executor == "local" else None
    try:
        return probe_environment(early), early
    except BaseException:
        if early is not None:
            early.close()
        raise


def _executor(config: RunConfig, device: str, gpu: GpuInfo | None, early: Zygote | None) -> Executor:
    try:
        return make_executor(config.executor, device, gpu["count"] if gpu else 0, config.address, config.parallel,
                             early)
    except BaseException:
        if early is not None:
            early.close()
        raise


def _header(plan: Plan, repo: Path, problems: Sequence[ProblemSpec],
            selection: Selection | None) -> RunHeader:
    """What a run records about itself: machine, code, configuration, selection and each problem's settings."""
    config, size, cuda_home = plan.config, plan.size, plan.build.cuda_home
    return {
        "environment": {**plan.env, "cuda_home": str(cuda_home) if cuda_home else None, "arch_list": plan.build.arch,
                        **host_info()},
        "git": git_info(repo),
        "config": {**dataclasses.asdict(config), "device": plan.device, "size": size},
        "selection": selection,
        "problems": {p.name: problem_record(config, p, size) for p in problems},
    }


def problem_record(config: RunConfig, problem: ProblemSpec, size: str) -> ProblemRecord:
    """One problem's settings as a run file records them (run.json's `problems`)."""
    atol, rtol = config.tolerance_for(problem)  # what its comparisons used
    return {"origin": problem.origin, "path": str(problem.path), "atol": atol, "rtol": rtol,
            "precision": config.precision_for(problem), "problem_atol": problem.atol, "problem_rtol": problem.rtol,
            "constants": dict(problem.constants), "overrides": problem.overrides(size)}


def _open_store(plan: Plan, resumed: RunStore | None, header: RunHeader) -> RunStore:
    """The resumed run, told about this selection's problems, or a new run with `header`."""
    if resumed is None:
        return RunStore.create(plan.config.results_dir, header)
    resumed.header["problems"] = {**resumed.header.get("problems", {}), **header["problems"]}
    resumed.save("running")
    return resumed


def _evaluate(plan: Plan, problems: Sequence[ProblemSpec], solutions: dict[str, list[SolutionSpec]],
              broken: Sequence[tuple[str, str]], store: RunStore, progress: Progress) -> None:
    """A failed row per broken problem file, then every evaluation; an interrupt (Ctrl-C, SIGTERM) kills the
    children and leaves the run stored as interrupted."""
    with _sigterm_as_interrupt():
        try:
            for name, reason in broken:
                if not is_done(store, name, EAGER):
                    store.add(Evaluation(problem=name, solution=EAGER, status=Status.LOAD_ERROR, message=reason,
                                         device=plan.device, size=plan.size, precision=plan.config.precision or "fp32"))
            try:
                evaluate_all(plan, problems, solutions, store, plan.build.cuda_home, progress)
            finally:
                plan.executor.close()
        except KeyboardInterrupt:
            process_tree.kill_all()
            store.finish("interrupted")
            write_tables(store)
            raise Interrupted(f"Interrupted; {len(store.evaluations)} finished evaluation(s) are saved in "
                              f"{store.directory}") from None


def _settle_lost(plan: Plan, store: RunStore, problems: Sequence[ProblemSpec], retry: bool, progress: Progress) -> None:
    """A resumed run: each evaluation under way when its process died becomes a `crashed` row (it may be what ended
    the run: run first again, it could end this one too); with `retry`, every crashed row is dropped to run again."""
    precision = {p.name: plan.config.precision_for(p) for p in problems}
    for lost in store.lost:
        problem, solution = lost.get("problem", "?"), lost.get("solution", "?")
        if any(e.problem == problem and e.solution == solution for e in store.evaluations):
            continue
        store.add(Evaluation(problem=problem, solution=solution, status=Status.CRASHED, device=plan.device,
                             size=plan.size, precision=precision.get(problem, plan.config.precision or "fp32"),
                             message=f"the run ended while this evaluation ran (started {lost.get('started', '?')}): "
                                     f"it may have ended the run; kbench run --resume {store.run_id} --retry-crashed "
                                     "runs it again"))
        progress(Note(f"{problem}/{solution} was under way when the run ended: recorded as crashed"))
    if retry:
        again = [e for e in store.evaluations if e.status == Status.CRASHED]
        store.evaluations = [e for e in store.evaluations if e.status != Status.CRASHED]
        if again:
            progress(Note(f"running {len(again)} crashed evaluation(s) again (--retry-crashed)"))


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


def _resumable_config(store: RunStore, env: Environment) -> RunConfig:
    """The resumed run's own configuration; resuming on another kind of machine would mix timings."""
    stored = store.header.get("environment", {})
    if machine_key(env, cpu=False) != machine_key(stored, cpu=False):
        here, there = (gpu := env.get("gpu")) and gpu["name"], (stored.get("gpu") or {}).get("name")
        raise UsageError(f"Run {store.run_id} was measured on {there or 'CPU'} with torch {stored.get('torch')}; "
                         f"this machine has {here or 'no GPU'} with torch {env.get('torch')}. Start a new run instead.")
    return RunConfig.from_json(store.header["config"])
