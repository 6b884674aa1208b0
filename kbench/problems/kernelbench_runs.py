"""KernelBench's run layout and records: its generated samples in, its eval-results fields out.

KernelBench's generation scripts write one file per level, problem and sample into a run folder,
`level_<L>_problem_<P>_sample_<S>_kernel.py` (beside `..._prompt.txt` files), and its evaluation writes
`eval_results.json`: per problem id, a list of samples with `sample_id`, `compiled`, `correctness`, `metadata`,
`runtime` and `runtime_stats` (milliseconds, mean/std/min/max rounded to 3 significant digits, `num_trials`), plus
`ref_runtime` and `ref_runtime_stats` in its newer versions. `import_run` maps a run folder onto solutions of a
problems folder (a KernelBench `levelN/` folder, its parent, or kbench-named `<L>_<P>_<name>` problems);
`eval_results` turns a kbench run into that record so that KernelBench's analysis scripts read it.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

from kbench.errors import UsageError
from kbench.problems.discovery import scan_problems
from kbench.problems.importer import ImportResult
from kbench.results.codec import JsonObject
from kbench.results.records import COMPILED, EAGER, Evaluation, ProblemSpec, Status
from kbench.results.storage import atomic_write

KERNEL_FILE = re.compile(r"level_(?P<level>\d+)_problem_(?P<problem>\d+)_sample_(?P<sample>\d+)_kernel\.py")
SAMPLE_NAME = "sample_{}"
_SAMPLE = re.compile(r"sample_(\d+)")
HEADER = "# Imported by kbench from KernelBench run file "
NOT_COMPILED = (Status.COMPILE_ERROR, Status.LOAD_ERROR)


Level = tuple[list[ProblemSpec], list[tuple[str, str]]]


def _problems_of_level(problems_dir: Path, level: int, cache: dict[int, Level]) -> Level:
    if level not in cache:
        folder = problems_dir / f"level{level}"
        cache[level] = scan_problems(folder if folder.is_dir() else problems_dir)
    return cache[level]


def match_problem(problems: Level, level: int, problem_id: int) -> ProblemSpec | str:
    """The problem numbered `problem_id` of `level`: named `<L>_<P>_...` (kbench's sample names), else `<P>_...`
    (a KernelBench level folder), leading zeros allowed; or why there is none."""
    good, broken = problems
    for pattern in (rf"0*{level}_0*{problem_id}_", rf"0*{problem_id}_"):
        found = [p for p in good if re.match(pattern, p.name)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            return f"{len(found)} problems match level {level} problem {problem_id}: {', '.join(p.name for p in found)}"
        bad = [why for name, why in broken if re.match(pattern, name)]
        if bad:
            return f"its problem file is broken ({bad[0]})"
    return f"no problem numbered {problem_id} (level {level}) among {len(good)} problem(s)"


def import_run(run_dir: Path, problems_dir: Path, solutions_dir: Path, force: bool) -> tuple[list[ImportResult], int]:
    """Each sample's kernel file as solutions_dir/<problem>/sample_<S>.py; the results, and how many files of the run
    folder are not kernel files (prompts, eval results: not imported)."""
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a folder: pass a KernelBench run folder (runs/<run_name>)")
    cache: dict[int, Level] = {}
    results, others = [], 0
    for source in sorted(p for p in run_dir.iterdir() if p.is_file()):
        if not source.name.endswith(".py"):
            others += 1
            continue
        named = KERNEL_FILE.fullmatch(source.name)
        if named is None:
            results.append(ImportResult(source, None, False, "not named level_<L>_problem_<P>_sample_<S>_kernel.py"))
            continue
        level, problem_id, sample = (int(named[k]) for k in ("level", "problem", "sample"))
        problem = match_problem(_problems_of_level(problems_dir, level, cache), level, problem_id)
        if isinstance(problem, str):
            results.append(ImportResult(source, None, False, f"{problem} in {problems_dir}"))
            continue
        results.append(_write(source, solutions_dir / problem.name / f"{SAMPLE_NAME.format(sample)}.py", force))
    if not results:
        raise UsageError(f"{run_dir} holds no level_<L>_problem_<P>_sample_<S>_kernel.py file")
    return results, others


def _write(source: Path, target: Path, force: bool) -> ImportResult:
    try:
        code = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return ImportResult(source, None, False, f"cannot read it: {exc}")
    text = f"{HEADER}{source.name}\n{code}"
    if target.exists() and not force and target.read_text(encoding="utf-8", errors="replace") != text:
        return ImportResult(source, None, False, f"{target} exists with other code; pass --force to overwrite it")
    try:
        atomic_write(target, text)
    except OSError as exc:
        return ImportResult(source, None, False, f"cannot write {target}: {exc.strerror or exc}")
    return ImportResult(source, target, True)


def _key(problem: str) -> str:
    """KernelBench's problem id: P of a `<L>_<P>_...` or `<P>_...` name; other names as they are."""
    found = re.match(r"(\d+)_(\d+)_", problem) or re.match(r"(\d+)_", problem)
    return found.groups()[-1] if found else problem


class RuntimeStats(TypedDict, total=False):
    """KernelBench's runtime_stats, in milliseconds to 3 significant digits; empty for a sample it did not time."""

    mean: float
    std: float
    min: float
    max: float
    num_trials: int
    hardware: str


class SampleMetadata(TypedDict):
    """kbench's own figures of a sample, in KernelBench's free `metadata` field."""

    kbench_status: str
    kbench_solution: str
    message: str
    warnings: list[str]
    precision: str
    device: str
    size: str
    median_ms: float | None
    speedup_vs_eager: float | None


class SampleRecord(TypedDict):
    """One sample of KernelBench's eval_results.json (runtime -1.0 where it was not timed)."""

    sample_id: int | str  # S of a sample_<S> solution, else the solution's name
    compiled: bool
    correctness: bool
    metadata: SampleMetadata
    runtime: float
    runtime_stats: RuntimeStats
    ref_runtime: float
    ref_runtime_stats: RuntimeStats


def _stats(samples: Sequence[float], hardware: str) -> RuntimeStats:
    ms = [s * 1e3 for s in samples]
    return {"mean": float(f"{statistics.fmean(ms):.3g}"), "std": float(f"{statistics.pstdev(ms):.3g}"),
            "min": float(f"{min(ms):.3g}"), "max": float(f"{max(ms):.3g}"), "num_trials": len(ms),
            "hardware": hardware}


def _record(e: Evaluation, hardware: str) -> SampleRecord:
    found = _SAMPLE.fullmatch(e.solution)
    trusted = e.status == Status.CORRECT and e.timing is not None and e.timing.samples
    runtime: RuntimeStats = _stats(e.timing.samples, hardware) if trusted and e.timing else {}
    reference: RuntimeStats = _stats(e.eager_timing.samples, hardware) if trusted and e.eager_timing else {}
    return {
        "sample_id": int(found[1]) if found else e.solution,
        "compiled": e.status not in NOT_COMPILED and e.status != Status.NOT_RUN,
        "correctness": e.status in (Status.CORRECT, Status.SUSPECT),
        "metadata": {"kbench_status": e.status.value, "kbench_solution": e.solution, "message": e.message,
                     "warnings": [w.text for w in e.warnings], "precision": e.precision, "device": e.device,
                     "size": e.size, "median_ms": e.timing.median * 1e3 if e.timing and e.timing.samples else None,
                     "speedup_vs_eager": e.speedup_vs_eager},
        "runtime": runtime.get("mean", -1.0),
        "runtime_stats": runtime,
        "ref_runtime": reference.get("mean", -1.0),
        "ref_runtime_stats": reference,
    }


def eval_results(doc: JsonObject, evaluations: Sequence[Evaluation]) -> dict[str, list[SampleRecord]]:
    """A kbench run as KernelBench's eval_results.json: per problem id, one record per solution (the eager and
    torch.compile rows are references, not samples). KernelBench writes one file per level; when a run holds two
    problems of one number from different levels, those two are keyed by their full names. Only `correct` rows carry
    a runtime: a `suspect` row's outputs pass (`correctness`) but its time is not trusted (-1.0, as KernelBench
    writes for an untimed sample)."""
    hardware = (doc.get("environment", {}).get("gpu") or {}).get("name") or doc.get("environment", {}).get("cpu", "")
    samples = [e for e in evaluations if e.solution not in (EAGER, COMPILED)]
    owners: dict[str, set[str]] = {}
    for e in samples:
        owners.setdefault(_key(e.problem), set()).add(e.problem)
    out: dict[str, list[SampleRecord]] = {}
    for e in samples:  # a number two problems share (level 1's 19 and level 3's 19) keeps the full names apart
        key = _key(e.problem)
        out.setdefault(key if len(owners[key]) == 1 else e.problem, []).append(_record(e, hardware))
    return dict(sorted(out.items(), key=lambda kv: (not kv[0].isdigit(), int(kv[0]) if kv[0].isdigit() else 0, kv[0])))


def write_eval_results(directory: Path, doc: JsonObject, evaluations: Sequence[Evaluation]) -> Path:
    target = directory / "eval_results.json"
    atomic_write(target, json.dumps(eval_results(doc, evaluations), indent=4) + "\n")
    return target
