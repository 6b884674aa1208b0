"""Bounded-memory comparisons end to end: a KernelBench-format problem whose output is 64x the comparison budget."""

from pathlib import Path

from kbench.commands.execute import execute
from kbench.config.run_config import RunConfig, TimingPolicy
from kbench.judge.checks import comparison
from kbench.problems.discovery import select
from kbench.results.records import Status
from tests.conftest import FIXTURES

BUDGET = 1 << 14  # 16 KiB for an output of 1 MiB


def test_every_trial_is_compared_in_chunks_within_the_budget_and_the_last_chunk_counts(tmp_path, monkeypatch):
    monkeypatch.setenv(comparison.BUDGET_ENV, str(BUDGET))
    problems, solutions = select(["big_output"], [], FIXTURES / "problems", FIXTURES / "solutions")
    config = RunConfig(device="cpu", trials=2, timing=TimingPolicy(max_time_s=0.2), compile_baseline=False,
                       results_dir=tmp_path / "results", cache_dir=tmp_path / "cache")
    rows = {e.solution: e for e in execute(config, problems, solutions, Path.cwd()).evaluations}
    honest, wrong = rows["honest"], rows["wrong_last"]
    assert honest.status == Status.CORRECT, honest.message
    assert all(t.chunks >= 64 for t in honest.trials), [t.chunks for t in honest.trials]  # 1 MiB in 64 pieces or more
    assert all(t.numel == 64 * 4096 for t in honest.trials)
    assert wrong.status == Status.INCORRECT
    assert wrong.trials[0].mismatched == 1 and wrong.trials[0].max_abs_err == 1.0, wrong.trials[0]
