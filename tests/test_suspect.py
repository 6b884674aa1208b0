"""The `suspect` status: which findings make a passing row untrustworthy, and what such a row shows."""

from kbench.commands.evaluation import with_suspicion
from kbench.judge.timing.checks import Calibration, disturbed_warning
from kbench.reports.leaderboard import fast_p, summarize
from kbench.results.findings import SUSPECT as SUSPECT_CODES
from kbench.results.findings import from_legacy
from kbench.results.records import EAGER, Evaluation, Measurement, Regime, Status


def _row(warnings=(), status=Status.CORRECT, solution="fast", device="cuda", eager=None):
    timing = Measurement((0.001,) * 10)
    return Evaluation(problem="p", solution=solution, status=status, device=device, size="full", timing=timing,
                      eager_timing=eager or Measurement((0.004,) * 10), speedup_vs_eager=4.0, speedup_vs_compile=2.0,
                      warnings=tuple(from_legacy(w) for w in warnings))


def test_each_timing_integrity_finding_makes_a_passing_row_suspect():
    for code in sorted(SUSPECT_CODES):
        row = with_suspicion(_row([f"[{code}] details"]))
        assert row.status == Status.SUSPECT, code
        assert row.message == f"outputs pass, timing not trusted: [{code}] details"
        assert row.speedup_vs_eager is None and row.speedup_vs_compile is None
        assert row.extra["speedup_vs_eager"] == 4.0 and row.timing.samples  # the figures and samples are kept


def test_heuristics_alone_never_change_a_verdict():
    row = with_suspicion(_row(["[implausible_speed] 12x faster than eager", "[threads] a thread", "[caching] x"]))
    assert row.status == Status.CORRECT and row.speedup_vs_eager == 4.0


def test_failing_rows_and_reference_rows_stay_as_they_are():
    assert with_suspicion(_row(["[timer_mismatch] x"], status=Status.INCORRECT)).status == Status.INCORRECT
    assert with_suspicion(_row(["[escaped_timer] x"], solution=EAGER)).status == Status.CORRECT


def test_a_reference_slowed_beside_the_solution_is_caught_against_its_calibration_neighbour():
    calm = Calibration({Regime.HOST: (0.0001,) * 10}, tuple(0.002 + i * 1e-6 for i in range(10)))
    slowed = Measurement(tuple(0.003 + i * 1e-6 for i in range(20)))
    steady = Measurement(tuple(0.002 + i * 1e-6 for i in range(20)))
    assert disturbed_warning(slowed, calm).code == "reference_disturbed"
    assert disturbed_warning(steady, calm) is None
    assert disturbed_warning(slowed, Calibration({Regime.HOST: (0.0001,) * 10})) is None  # nothing to compare with


def test_a_suspect_row_counts_as_failing_in_fast_p_and_the_geomean():
    honest = with_suspicion(_row())
    suspect = with_suspicion(_row(["[state_changed] x"]))
    assert fast_p([honest], 1.0) == 1.0 and fast_p([suspect], 0.0) == 0.0
    assert summarize([suspect]).geomean_eager is None


def test_the_gate_fails_a_suspect_row_with_its_reason():
    from kbench.commands.gate import FAIL, cpu_checks
    from kbench.results.records import SolutionSpec, TrialResult

    row = with_suspicion(_row(["[clock_patched] it replaced time.perf_counter"], device="cpu"))
    row = type(row)(**{**row.__dict__, "trials": (TrialResult(seed=1, passed=True),)})
    checks = cpu_checks(row, SolutionSpec("p", "fast", __import__("pathlib").Path("x.py"), ("cpu",)))
    failing = [c for c in checks if c.outcome == FAIL]
    assert [c.name for c in failing] == ["trusted timing"] and "clock_patched" in failing[0].message
