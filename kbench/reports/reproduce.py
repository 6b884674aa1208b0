"""The command that reruns one row alone: `kbench run -p PROBLEM -s SOLUTION` with the run's settings."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kbench.config.run_config import RunConfig
from kbench.results.header import selected_solutions
from kbench.results.records import COMPILED, EAGER, Evaluation

DEFAULT = RunConfig()
# RunConfig fields that say where or how widely a run went (executor, cache, output), not what it measured: a rerun of
# one row on this machine leaves them out.
_WHERE = ("executor", "address", "parallel", "jobs", "results_dir", "cache_dir", "build_unrunnable")
# Options of `kbench run` that carry a RunConfig field's value as it is.
_VALUED = (("trials", "--trials"), ("seed", "--seed"), ("atol", "--atol"), ("rtol", "--rtol"),
           ("tolerance", "--tolerance"), ("timeout_s", "--timeout"))


def command(e: Evaluation, options: Sequence[str] = (), problem_ref: str | None = None,
            solution_ref: str | None = None) -> str:
    """`kbench run -p P -s S --device D --size Z [--precision X]` and `options`: what reruns this row (the gate's
    reproduce line). A reference row (eager, torch.compile) is rerun with its problem, without -s."""
    precision = ["--precision", e.precision] if e.precision != "fp32" else []
    solution = [] if e.solution in (EAGER, COMPILED) else ["-s", solution_ref or e.solution]
    words = ["kbench", "run", "-p", problem_ref or e.problem, *solution, "--device", e.device, "--size", e.size,
             *precision, *options]
    return " ".join(shlex.quote(w) for w in words)


def config_options(config: Mapping[str, Any]) -> list[str]:
    """The `kbench run` options that give a run file's configuration (run.json `config`) where it differs from the
    defaults; device, size and precision come from each row (see `command`)."""
    given = {k: v for k, v in config.items() if k not in _WHERE}
    out: list[str] = []
    for name, option in _VALUED:
        if name in given and given[name] != getattr(DEFAULT, name):
            out += [option, f"{given[name]:g}" if isinstance(given[name], float) else str(given[name])]
    math = given.get("math")
    if math is not None and math != dataclasses.asdict(DEFAULT.math):
        out.append("--no-tf32")  # the one way `kbench run` sets math flags other than the defaults
    if given.get("compile_baseline") is False:
        out.append("--no-compile-baseline")
    if given.get("two_sizes") is not None:
        out.append("--two-sizes" if given["two_sizes"] else "--one-size")
    max_time = (given.get("timing") or {}).get("max_time_s")
    if max_time is not None and max_time != DEFAULT.timing.max_time_s:
        out += ["--max-time", f"{max_time:g}"]
    if given.get("kernel_profile") is False:
        out.append("--no-kernel-profile")
    return out


def folder_options(selection: Mapping[str, Any] | None) -> list[str]:
    """--problems-dir/--solutions-dir where a run's folders are not the default layout (problems/ and solutions/
    beside it, which kbench finds by itself)."""
    if not selection or not selection.get("problems_dir"):
        return []
    problems = Path(selection["problems_dir"])
    solutions = Path(selection.get("solutions_dir") or problems.parent / "solutions")
    if problems.name == "problems" and solutions == problems.parent / "solutions":
        return []
    return ["--problems-dir", str(problems), "--solutions-dir", str(solutions)]


def run_command(e: Evaluation, doc: Mapping[str, Any]) -> str:
    """What reruns row `e` of the run file `doc` alone, with the run's non-default options and folders. A problem or
    solution the run was given as a file is named by that file."""
    selection = doc.get("selection") or {}
    problem_path = (doc.get("problems") or {}).get(e.problem, {}).get("path")
    problem_ref = problem_path if problem_path and problem_path in selection.get("problems", ()) else None
    given = [s for s in selected_solutions(selection) if "/" in s and Path(s).stem == e.solution]
    solution_ref = given[0] if given else None
    options = [*config_options(doc.get("config") or {}), *folder_options(selection)]
    return command(e, options, problem_ref, solution_ref)
