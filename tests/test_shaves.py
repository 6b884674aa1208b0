"""No code in the solution's process can lower its reported time and stay `correct` (docs/timing.md: the
judge's clock bounds the reported time). Three mechanisms, each at a tenth and at a half, on the CPU."""

import os
from pathlib import Path

import pytest

from kbench.commands.execute import execute
from kbench.config.run_config import RunConfig, TimingPolicy
from kbench.problems.discovery import select
from kbench.results.records import Status
from tests.conftest import FIXTURES
from tests.shaves import write_shaves


@pytest.fixture(scope="module")
def shaved_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shaves")
    names = write_shaves(tmp / "solutions" / "shaved")
    config = RunConfig(device="cpu", trials=2, compile_baseline=False, timeout_s=120,
                       timing=TimingPolicy(max_time_s=1.5), results_dir=tmp / "results", cache_dir=tmp / "cache")
    problems, solutions = select(["shaved"], [], FIXTURES / "problems", tmp / "solutions")
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # as the timed fixtures run: one intra-op thread in every child
    try:
        store = execute(config, problems, solutions, Path.cwd())
    finally:
        if previous is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = previous
    return store, names


def test_every_shave_is_suspect_with_the_judges_reason(shaved_run):
    store, names = shaved_run
    rows = {e.solution: e for e in store.evaluations}
    for name in names:
        row = rows[name]
        assert row.status == Status.SUSPECT, (name, row.status, row.message, row.warnings)
        assert "timer_mismatch" in row.flags and row.speedup_vs_eager is None, (name, row.warnings)
        assert row.diagnostics.protocol.retimed.startswith("[timer_mismatch]")  # flagged in both timings


def test_the_honest_copy_beside_them_is_correct_and_unflagged(shaved_run):
    store, _ = shaved_run
    honest = next(e for e in store.evaluations if e.solution == "honest_copy")
    assert honest.status == Status.CORRECT and "timer_mismatch" not in honest.flags, honest.warnings
    assert honest.timing.regime == "host" and len(honest.timing.judge_samples) == len(honest.timing.samples)
