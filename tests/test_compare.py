"""Compare verdicts on synthetic runs whose answers are known."""

import random

import pytest
from typer.testing import CliRunner

from kbench.cli import app
from kbench.errors import UsageError
from kbench.reports import compare
from kbench.results.records import Evaluation, Measurement, Status
from kbench.results.stats import mann_whitney_u
from kbench.results.storage import LoadedRun, RunStore


def noisy(center, n=40, spread=0.002, seed=0):
    rng = random.Random(seed)
    return tuple(center * (1 + rng.uniform(-spread, spread)) for _ in range(n))


def ev(solution, samples=None, status=Status.CORRECT, problem="p"):
    timing = Measurement(samples) if samples else None
    return Evaluation(problem=problem, solution=solution, status=status, device="cuda", size="full", timing=timing)


def run(label, *evaluations, gpu="NVIDIA H100 80GB HBM3", torch="2.11.0"):
    doc = {"run_id": label, "environment": {"gpu": {"name": gpu}, "torch": torch}, "config": {"math": {"cudnn_tf32": True}}}
    return LoadedRun(path=None, label=label, doc=doc, evaluations=tuple(evaluations))


def test_mann_whitney_matches_reference_values():
    # Reference p-values from scipy.stats.mannwhitneyu(method="asymptotic"), the same corrections.
    assert mann_whitney_u([1, 2, 3], [4, 5, 6]) == (0.0, pytest.approx(0.0808556, abs=1e-6))
    assert mann_whitney_u([1, 2, 2, 3, 5], [2, 4, 6, 6, 7]) == (4.0, pytest.approx(0.0896860, abs=1e-6))
    assert mann_whitney_u([1.0] * 5, [1.0] * 5)[1] == 1.0


def test_identical_samples_are_same():
    s = noisy(1.0)
    assert compare.speed_verdict(s, s, 0.01)[0] == compare.SAME


def test_a_five_percent_shift_with_small_noise_is_detected_both_ways():
    base = noisy(1.0, seed=1)
    assert compare.speed_verdict(base, noisy(1.05, seed=2), 0.01)[0] == compare.SLOWER
    verdict, ratio, p = compare.speed_verdict(base, noisy(0.95, seed=3), 0.01)
    assert verdict == compare.FASTER and ratio == pytest.approx(0.95, abs=0.003) and p < 1e-6


def test_heavy_overlap_is_unclear_and_small_shifts_are_same():
    wide_a, wide_b = noisy(1.0, n=8, spread=0.3, seed=4), noisy(1.03, n=8, spread=0.3, seed=5)
    assert compare.speed_verdict(wide_a, wide_b, 0.01)[0] in (compare.UNCLEAR, compare.SAME)
    assert compare.speed_verdict(noisy(1.0, seed=6), noisy(1.005, seed=7), 0.01)[0] == compare.SAME


def test_status_transitions():
    before = run("a", ev("stays", noisy(1.0)), ev("breaks", noisy(1.0)), ev("fixed", status=Status.INCORRECT),
                 ev("gone", noisy(1.0)), ev("bad", status=Status.CRASHED))
    after = run("b", ev("stays", noisy(1.0, seed=9)), ev("breaks", status=Status.INCORRECT), ev("fixed", noisy(1.0)),
                ev("added", noisy(1.0)), ev("bad", status=Status.CRASHED))
    rows = {r.solution: r for r in compare.compare_runs(before, after, 0.01)}
    assert {k: r.change for k, r in rows.items()} == {
        "stays": "same", "breaks": "newly failing", "fixed": "fixed", "added": "new", "gone": "removed", "bad": "failing",
    }
    assert rows["breaks"].mark == "!" and rows["breaks"].regression and not rows["fixed"].regression


def test_a_solution_not_run_in_both_runs_is_neutral_not_failing():
    # e.g. a CPU-only solution in two CUDA runs; not run in one run only is still a status change.
    before = run("a", ev("cpu_only", status=Status.NOT_RUN), ev("dropped", noisy(1.0)))
    after = run("b", ev("cpu_only", status=Status.NOT_RUN), ev("dropped", status=Status.NOT_RUN))
    rows = {r.solution: r for r in compare.compare_runs(before, after, 0.01)}
    assert rows["cpu_only"].change == "not run" and rows["cpu_only"].mark == "" and not rows["cpu_only"].regression
    assert rows["dropped"].change == "newly failing"


def test_rows_match_on_size_too():
    before = run("a", ev("s", noisy(1.0)))
    after = run("b", Evaluation(problem="p", solution="s", status=Status.CORRECT, device="cuda", size="small",
                                timing=Measurement(noisy(1.0))))
    assert sorted(r.change for r in compare.compare_runs(before, after, 0.01)) == ["new", "removed"]


def test_different_gpus_or_torch_versions_are_refused_unless_asked():
    a, b = run("a", ev("s", noisy(1.0))), run("b", ev("s", noisy(1.0)), gpu="NVIDIA A100")
    with pytest.raises(UsageError, match="different machines or torch versions.*--ignore-env"):
        compare.compare_runs(a, b, 0.01)
    with pytest.raises(UsageError):
        compare.compare_runs(a, run("c", ev("s", noisy(1.0)), torch="2.12.0"), 0.01)
    assert compare.compare_runs(a, b, 0.01, ignore_env=True)[0].change == "same"


def _store(results_dir, *evaluations):
    store = RunStore.create(results_dir, {"environment": {"gpu": {"name": "G"}, "torch": "t"}, "config": {"math": {}}})
    for e in evaluations:
        store.add(e)
    store.finish()
    return store


def test_cli_compares_the_latest_two_runs_and_fails_on_regression(tmp_path):
    import time

    _store(tmp_path, ev("s", noisy(1.0)))
    time.sleep(1.1)  # run ids have one-second resolution
    _store(tmp_path, ev("s", noisy(1.2, seed=3)))
    (tmp_path / "99999999-broken").mkdir()
    (tmp_path / "99999999-broken" / "run.json").write_text("{not json")
    runner = CliRunner()
    result = runner.invoke(app, ["compare", "--results-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "slower" in result.output and "skipped 99999999-broken" in result.output
    result = runner.invoke(app, ["compare", "--results-dir", str(tmp_path), "--fail-on-regression", "--format", "json"])
    assert result.exit_code == 1 and '"change":"slower"' in result.output.replace(" ", "")


def test_cli_explains_what_is_missing(tmp_path):
    result = CliRunner().invoke(app, ["compare", "--results-dir", str(tmp_path)])
    assert result.exit_code == 2 and "Need two readable runs" in result.output
    result = CliRunner().invoke(app, ["compare", "nope", "--baseline", "h100", "--results-dir", str(tmp_path)])
    assert result.exit_code == 2 and "No run or baseline" in result.output
