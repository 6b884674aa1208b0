"""`kbench gate`: the CI correctness gate. Every selected solution must pass every check this machine can run."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kbench.commands.execute import execute
from kbench.commands.machine import probe_environment
from kbench.commands.progress import Progress
from kbench.config.run_config import RunConfig
from kbench.errors import KbenchError, UsageError
from kbench.problems.discovery import select
from kbench.reports import compare as comparing
from kbench.reports import reproduce
from kbench.results.header import Environment
from kbench.results.records import Evaluation, ProblemSpec, SolutionSpec, Status
from kbench.results.storage import LoadedRun, RunStore, atomic_write, load, resolve

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass(frozen=True)
class Check:
    problem: str
    solution: str
    name: str  # build, correct@full, correct@small, speed
    outcome: str  # pass, fail, skip
    message: str = ""
    reproduce: str = ""


@dataclass(frozen=True)
class GateResult:
    mode: str  # "gpu" or "cpu"
    checks: tuple[Check, ...]
    notes: tuple[str, ...]  # what could not be checked here, said plainly
    runs: tuple[Path, ...]

    def count(self, outcome: str) -> int:
        return sum(c.outcome == outcome for c in self.checks)

    @property
    def passed(self) -> bool:
        """True only when at least one check ran and none failed: a gate never passes on zero checks."""
        return self.count(FAIL) == 0 and self.count(PASS) > 0


def _repro(e: Evaluation, *extra: str) -> str:
    return reproduce.command(e, extra)


def _trials_check(e: Evaluation, size: str, trials: Sequence, name: str, repro: str) -> Check:
    if not trials:
        return Check(e.problem, e.solution, name, FAIL, f"{e.status.value}: {e.message}", repro)
    bad = next((t for t in trials if not t.passed), None)
    if bad is not None:
        return Check(e.problem, e.solution, name, FAIL, f"incorrect at size {size}: {bad.message}", repro)
    return Check(e.problem, e.solution, name, PASS)


def build_check(e: Evaluation) -> Check:
    repro = f"kbench build -p {e.problem} -s {e.solution}"
    if e.status == Status.LOAD_ERROR:  # seen before any build (a syntax error, no ModelNew)
        return Check(e.problem, e.solution, "build", FAIL, f"{e.status.value}: {e.message}", repro)
    if e.compile is None:
        return Check(e.problem, e.solution, "build", SKIP, e.message)
    if e.compile.ok:
        return Check(e.problem, e.solution, "build", PASS)
    return Check(e.problem, e.solution, "build", FAIL, f"{e.status.value}: {e.message}", repro)


def cuda_checks(e: Evaluation) -> list[Check]:
    """On a GPU: it builds, and it is correct at full size and (checked in the same child) at small size. A row this
    machine cannot run (`not_run`: a kernel DSL that is not installed, a precision it does not declare) is skipped,
    named with its reason, as the README says: the gate checks what this machine can run."""
    if e.status == Status.NOT_RUN:
        return [Check(e.problem, e.solution, "runs here", SKIP, e.message)]
    checks = [build_check(e)]
    if checks[0].outcome != PASS:
        return checks
    checks.append(_trials_check(e, "full", e.trials, "correct@full", _repro(e)))
    small = e.size_checks.get("small", ())
    if e.trials and all(t.passed for t in e.trials) and not small:
        checks.append(Check(e.problem, e.solution, "correct@small", SKIP, "the problem declares no small size"))
    elif checks[-1].outcome == PASS:
        checks.append(_trials_check(e, "small", small, "correct@small", _repro(e, "--two-sizes")))
    return checks + _trust_check(e)


def _trust_check(e: Evaluation) -> list[Check]:
    """A `suspect` row passed its trials, but its timing cannot be trusted: that fails the gate too."""
    if e.status != Status.SUSPECT:
        return []
    return [Check(e.problem, e.solution, "trusted timing", FAIL, e.message, _repro(e))]


def cpu_checks(e: Evaluation, spec: SolutionSpec) -> list[Check]:
    """Without a GPU: CUDA-only solutions must build; CPU solutions must be correct at small size."""
    if "cpu" in spec.devices:
        return [_trials_check(e, "small", e.trials, "correct@small", _repro(e)), *_trust_check(e)]
    return [build_check(e)]


def speed_checks(run: LoadedRun, baseline: LoadedRun, max_regression: float,
                 selected: set[tuple[str, str]]) -> list[Check]:
    rows = comparing.compare_runs(baseline, run, max_regression)
    checks = []
    for row in (r for r in rows if (r.problem, r.solution) in selected):
        if row.change == comparing.SLOWER:
            message = (f"{row.ratio:.3f}x the baseline's median ({row.before_ms:.3f} -> {row.after_ms:.3f} ms, "
                       f"p={row.p_value:.2g})")
            checks.append(Check(row.problem, row.solution, "speed", FAIL, message,
                                f"kbench compare --baseline {baseline.path}"))
        elif row.change in (comparing.SAME, comparing.FASTER, comparing.UNCLEAR) and row.after_status == "correct":
            checks.append(Check(row.problem, row.solution, "speed", PASS, row.change))
    return checks


def _run(config: RunConfig, problems: list[ProblemSpec], solutions: dict[str, list[SolutionSpec]],
         progress: Progress, env: Environment) -> RunStore:
    return execute(config, problems, solutions, Path.cwd(), progress, env=env)


def gate(problem_refs: Sequence[str], solution_refs: Sequence[str], problems_dir: Path, solutions_dir: Path,
         base: RunConfig, baseline: str | None, max_regression: float,
         progress: Progress = lambda _: None) -> GateResult:
    problems, solutions = select(problem_refs, solution_refs, problems_dir, solutions_dir)
    specs = {(s.problem, s.name): s for group in solutions.values() for s in group}
    if not specs:
        raise KbenchError("No solutions selected: the gate never passes on zero checks.")
    env = probe_environment()  # once: both runs below reuse it
    gpu = bool(env.get("gpu"))
    if baseline is not None and not gpu:
        raise UsageError("--baseline needs a GPU: speed is not checked on a machine without one.")
    base = dataclasses.replace(base, compile_baseline=False)
    checks: list[Check] = []
    notes: list[str] = []
    runs: list[Path] = []
    cuda = {p: [s for s in group if "cuda" in s.devices] for p, group in solutions.items()}
    if gpu and any(cuda.values()):
        store = _run(dataclasses.replace(base, device="cuda", size="full", two_sizes=True), problems, cuda, progress,
                     env)
        runs.append(store.directory)
        checks += [c for e in store.evaluations if (e.problem, e.solution) in specs for c in cuda_checks(e)]
        if baseline is not None:
            checks += speed_checks(load(store.directory), load(resolve(baseline, base.results_dir)), max_regression,
                                   set(specs))
        else:
            notes.append("speed: not checked (no --baseline)")
    # Without a GPU every solution goes through the CPU run (CUDA ones are built there); with one, the CPU-only ones.
    on_cpu = (solutions if not gpu
              else {p: [s for s in group if "cuda" not in s.devices] for p, group in solutions.items()})
    if any(on_cpu.values()):
        store = _run(dataclasses.replace(base, device="cpu", size="small", two_sizes=False, build_unrunnable=not gpu),
                     problems, on_cpu, progress, env)
        runs.append(store.directory)
        chosen = {(s.problem, s.name) for group in on_cpu.values() for s in group}
        checks += [c for e in store.evaluations if (e.problem, e.solution) in chosen
                   for c in cpu_checks(e, specs[(e.problem, e.solution)])]
    if not gpu:
        n_cuda = sum(len(g) for g in cuda.values())
        notes.append(f"no GPU here: {n_cuda} CUDA solution(s) were compiled and linked but not run; "
                     "correctness at full size and speed were not checked")
    skipped = [c for c in checks if c.outcome == SKIP]
    if skipped:
        notes.append(f"{len(skipped)} check(s) could not run here: " + "; ".join(
            f"{c.problem}/{c.solution} {c.name}: {c.message}" for c in skipped))
    return GateResult("gpu" if gpu else "cpu", tuple(checks), tuple(notes), tuple(runs))


def junit_xml(result: GateResult) -> str:
    """One test case per solution and check, as CI systems display them."""
    suite = ET.Element("testsuite", name="kbench gate", tests=str(len(result.checks)),
                       failures=str(result.count(FAIL)), skipped=str(result.count(SKIP)), errors="0")
    for c in result.checks:
        case = ET.SubElement(suite, "testcase", classname=f"kbench.{c.problem}", name=f"{c.solution}::{c.name}")
        if c.outcome == FAIL:
            failure = ET.SubElement(case, "failure", message=c.message[:500])
            failure.text = f"{c.message}\nreproduce: {c.reproduce}"
        elif c.outcome == SKIP:
            ET.SubElement(case, "skipped", message=c.message[:500])
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(result: GateResult, path: Path) -> None:
    atomic_write(path, junit_xml(result))
