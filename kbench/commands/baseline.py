"""`kbench baseline`: time only the references of a run and keep its record as a named baseline."""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from kbench.commands.execute import execute
from kbench.commands.progress import Progress
from kbench.commands.run import what_to_run
from kbench.config.run_config import RunConfig
from kbench.problems.discovery import choose_problems
from kbench.results.storage import BASELINES, RUN_FILE, RunStore, resolve


def baseline(config: RunConfig, problem_refs: Sequence[str], problems_dir: Path, name: str | None,
             progress: Progress = lambda _: None, resume: str | None = None) -> tuple[RunStore, Path]:
    """`kbench baseline`: time only the references (eager and torch.compile) and store the run as a baseline.

    With `resume` (an interrupted baseline run), only the problems it does not hold yet are timed."""
    previous = resolve(resume, config.results_dir) if resume else None
    problem_refs, _, problems_dir, _, selection = what_to_run(previous, problem_refs, [], problems_dir, problems_dir)
    problems, broken = choose_problems(problem_refs, problems_dir)
    store = execute(config, problems, {}, Path.cwd(), progress, broken, previous, selection=selection)
    env = store.header["environment"]
    label = name or ((env.get("gpu") or {}).get("name") or "cpu") + (
        f"-{config.precision}" if config.precision not in (None, "fp32") else "")
    target = config.results_dir / BASELINES / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', label).strip('-').lower()}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(store.directory / RUN_FILE, target)
    return store, target
