"""Every broken fixture solution gets its exact verdict, and the run goes on past each one."""

import json
import os
from pathlib import Path

import pytest

from kbench.commands.execute import execute
from kbench.commands.progress import (
    BuildFinished, BuildStarted, EvaluationFinished, EvaluationPhase, EvaluationStarted, line, Planned,
)
from kbench.execution import isolation
from kbench.problems.discovery import select
from kbench.config.run_config import RunConfig, TimingPolicy
from kbench.results.records import COMPILED, EAGER, Status
from kbench.results import storage
from kbench.results.storage import load_run
from tests.conftest import FIXTURES

EXPECTED = {
    EAGER: Status.CORRECT,
    "good": Status.CORRECT,
    "raises_on_import": Status.LOAD_ERROR,
    "syntax_error": Status.LOAD_ERROR,
    "no_modelnew": Status.LOAD_ERROR,
    "exits": Status.CRASHED,
    "segfault": Status.CRASHED,
    "hangs": Status.TIMEOUT,
    "raises_in_forward": Status.RUNTIME_ERROR,
    "wrong_values": Status.INCORRECT,
    "wrong_shape": Status.INCORRECT,
    "produces_nan": Status.INCORRECT,
    "forges_result": Status.INCORRECT,
    "hardcoded_small": Status.INCORRECT,
}


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    config = RunConfig(
        device="cpu", trials=2, timeout_s=30, timing=TimingPolicy(max_time_s=0.2), compile_baseline=False,
        two_sizes=True,
        results_dir=tmp / "results", cache_dir=tmp / "cache",
    )
    problems, solutions = select(["tiny"], [], FIXTURES / "problems", FIXTURES / "solutions")
    events: list = []
    store = execute(config, problems, solutions, Path.cwd(), events.append)
    return store, events


def test_each_fixture_gets_its_exact_verdict(fixture_run):
    store, _ = fixture_run
    verdicts = {e.solution: e.status for e in store.evaluations}
    assert verdicts == EXPECTED


def test_failure_messages_say_what_happened(fixture_run):
    store, _ = fixture_run
    by_name = {e.solution: e for e in store.evaluations}
    assert "broken at import" in by_name["raises_on_import"].message
    assert "SyntaxError" in by_name["syntax_error"].message
    assert "defines no class ModelNew" in by_name["no_modelnew"].message
    assert "exited with code 3" in by_name["exits"].message
    assert "SIGSEGV" in by_name["segfault"].message
    assert "no result after" in by_name["hangs"].message
    assert "ValueError: kernel launch failed" in by_name["raises_in_forward"].message
    assert "shape (16,) != reference (8, 16)" in by_name["wrong_shape"].message


def test_correct_rows_carry_timing_and_speedups(fixture_run):
    store, _ = fixture_run
    by_name = {e.solution: e for e in store.evaluations}
    good = by_name["good"]
    assert good.timing is not None and len(good.timing.samples) >= 10
    assert good.eager_timing is not None and len(good.eager_timing.samples) == len(good.timing.samples)
    assert good.speedup_vs_eager == pytest.approx(good.eager_timing.median / good.timing.median)
    assert good.speedup_vs_compile is None  # no compile baseline in this run
    assert len(good.trials) == 2 and all(t.passed and t.max_abs_err is not None for t in good.trials)
    assert [t.seed for t in good.trials] == [43, 44]


def test_incorrect_rows_record_per_trial_error_figures(fixture_run):
    store, _ = fixture_run
    wrong = next(e for e in store.evaluations if e.solution == "wrong_values")
    trial = wrong.trials[0]
    assert not trial.passed and trial.mismatched == trial.numel == 8 * 16
    assert trial.max_abs_err > 0.1 and wrong.timing is None


def test_results_are_written_and_reload(fixture_run):
    store, _ = fixture_run
    doc, evaluations = load_run(store.directory)
    assert doc["state"] == "complete" and doc["version"] == storage.VERSION == 4
    assert doc["config"]["device"] == "cpu" and doc["config"]["size"] == "small"
    assert doc["environment"]["torch"] and "commit" in doc["git"]
    assert [e.solution for e in evaluations] == [e.solution for e in store.evaluations]
    csv = (store.directory / "results.csv").read_text().splitlines()
    assert len(csv) == len(EXPECTED) + 1 and csv[0].startswith("problem,solution,status")
    assert "| tiny" in (store.directory / "results.md").read_text()
    raw = json.loads((store.directory / "run.json").read_text())
    good = next(e for e in raw["evaluations"] if e["solution"] == "good")
    assert good["timing"]["samples"] and good["timing"]["median"] > 0


def test_a_solution_with_hard_coded_sizes_fails_at_the_other_size(fixture_run):
    store, _ = fixture_run
    by_name = {e.solution: e for e in store.evaluations}
    hardcoded, good = by_name["hardcoded_small"], by_name["good"]
    assert all(t.passed for t in hardcoded.trials)  # right at the run's (small) size...
    assert hardcoded.message.startswith("at size full: output shape (8, 16) != reference (64, 32)")
    assert [t.passed for t in good.size_checks["full"]] == [True, True]
    assert [t.seed for t in good.size_checks["full"]] == [143, 144]


def test_a_forged_result_on_stdout_changes_nothing(fixture_run):
    store, _ = fixture_run
    forged = next(e for e in store.evaluations if e.solution == "forges_result")
    assert forged.status == Status.INCORRECT and forged.trials and not forged.trials[0].passed


def test_progress_is_reported(fixture_run):
    store, events = fixture_run
    messages = [text for text in map(line, events) if text is not None]
    assert "tiny: reference (eager) ..." in messages
    assert any(m.startswith("  tiny/hangs: timeout - no result after") for m in messages)
    # Counts known up front: 13 solutions (2 with nothing to build: a syntax error, no ModelNew) and a reference.
    assert [e for e in events if isinstance(e, Planned)] == [Planned(builds=11, evaluations=14)]
    started = {(e.problem, e.solution) for e in events if isinstance(e, BuildStarted)}
    assert len(started) == 11 and started == {(e.problem, e.solution) for e in events if isinstance(e, BuildFinished)}
    finished = [e for e in events if isinstance(e, EvaluationFinished)]
    assert [s for e in finished for s in e.statuses] == [row.status for row in store.evaluations]
    # The child's own event reaches the display: a solution that was timed says so, between its start and its end.
    good = [e for e in events if isinstance(e, (EvaluationStarted, EvaluationPhase, EvaluationFinished))
            and e.solution == "good"]
    assert [type(e) for e in good] == [EvaluationStarted, EvaluationPhase, EvaluationFinished]
    assert good[1] == EvaluationPhase("tiny", "good", "timed")
    assert EvaluationPhase("tiny", "reference (eager)", "timed") in events
    assert not any(isinstance(e, EvaluationPhase) and e.solution == "wrong_values" for e in events)  # never timed


def test_compile_baseline_is_checked_and_timed(tmp_path):
    """torch.compile of the reference gets its own row; solutions' speedups are scaled through it."""
    config = RunConfig(device="cpu", trials=2, timeout_s=600, timing=TimingPolicy(max_time_s=0.2),
                       results_dir=tmp_path / "results", cache_dir=tmp_path / "cache")
    problems, solutions = select(["tiny"], ["good"], FIXTURES / "problems", FIXTURES / "solutions")
    store = execute(config, problems, solutions, Path.cwd())
    by_name = {e.solution: e for e in store.evaluations}
    assert list(by_name) == [EAGER, COMPILED, "good"]
    eager, compiled, good = by_name[EAGER], by_name[COMPILED], by_name["good"]
    assert compiled.status == Status.CORRECT, compiled.message
    assert len(compiled.trials) == 2 and all(t.passed for t in compiled.trials)
    assert compiled.speedup_vs_eager == pytest.approx(eager.timing.median / compiled.timing.median)
    assert good.speedup_vs_compile == pytest.approx(good.speedup_vs_eager / compiled.speedup_vs_eager)


def test_each_evaluation_records_where_its_time_went(fixture_run):
    store, _ = fixture_run
    by_name = {e.solution: e for e in store.evaluations}
    good, wrong = by_name["good"].phases, by_name["wrong_values"].phases
    # the fixture runs on CPU, where there is no kernel profile (trust_profile)
    assert list(good) == ["setup", "calibration_start", "waiting", "calibration", "load", "build", "trials",
                          "other_sizes", "timing", "trust_determinism", "trust_fp64"]
    assert all(v >= 0 for v in good.values())
    assert sum(good.values()) <= by_name["good"].seconds  # the rest is the child's start-up and import of torch
    assert good["timing"] > 0
    assert list(wrong) == ["setup", "calibration_start", "waiting", "calibration", "load", "build", "trials"]  # stops there


def test_a_step_marked_again_adds_its_seconds_to_the_first(monkeypatch):
    from kbench.judge import harness

    ticks = iter([0.0, 1.0, 3.0, 3.5])
    monkeypatch.setattr(harness, "_perf_counter", lambda: next(ticks))
    phases = harness.Phases()
    phases.mark("calibration")
    phases.mark("load")
    phases.mark("calibration")  # a fresh candidate process calibrated again
    assert phases.seconds == {"calibration": 1.5, "load": 2.0}


def test_children_can_import_kbench_from_where_the_parent_found_it(tmp_path):
    """The child's PYTHONPATH starts with the folder that holds the kbench package (a source checkout works
    without an install), not a folder inside it."""
    import kbench

    first = isolation.worker_path_env()["PYTHONPATH"].split(os.pathsep)[0]
    assert (Path(first) / "kbench" / "__init__.py").resolve() == Path(kbench.__file__).resolve()


def test_a_cpu_run_leaves_no_multiprocessing_temp_folder(tmp_path):
    """The judge hands its candidate CPU tensors by descriptor, through multiprocessing's resource sharer and its
    socket in a pymp-* temp folder; the worker ends with os._exit, so it removes that folder itself."""
    import subprocess
    import sys

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "kbench", "run", "-p", "tiny", "-s", "good", "--device", "cpu", "--no-compile-baseline",
         "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir", str(FIXTURES / "solutions"),
         "--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache"), "--max-time", "0.1",
         "--no-progress"], capture_output=True, text=True, timeout=300,
        env={**isolation.worker_path_env(), "TMPDIR": str(scratch)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "correct" in done.stdout
    assert sorted(p.name for p in scratch.iterdir() if p.name.startswith("pymp-")) == []
