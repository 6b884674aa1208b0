"""The `suspect` status: which findings make a passing row untrustworthy, and what such a row shows. The verdict is
decided once (kbench.judge.verdict.decide), at the end of the judge's evaluation; nothing later changes it."""

import dataclasses

import pytest

from kbench.judge import judge
from kbench.judge.draft import Draft
from kbench.judge.timing.checks import Calibration, disturbed_warning
from kbench.judge.verdict import Decision, decide
from kbench.measure.roofline import floor
from kbench.reports.leaderboard import fast_p, summarize
from kbench.results.figures import Ceilings, Work
from kbench.results.findings import SUSPECT as SUSPECT_CODES
from kbench.results.findings import FindingCode, from_legacy
from kbench.results.records import Evaluation, Measurement, Regime, Speedups, Status
from kbench.wire.jobs import EvaluateJob, ProblemRef, SolutionRef

FOUR = Speedups(4.0, 2.0)


def _decided(warnings=(), status=Status.CORRECT, message=""):
    return decide(status, message, [from_legacy(w) for w in warnings], FOUR)


def _row(decision: Decision, device="cuda"):
    """A solution's row as the parent makes it from the judge's result (no status of its own)."""
    return Evaluation(problem="p", solution="fast", status=decision.status, message=decision.message, device=device,
                      size="full", timing=Measurement((0.001,) * 10), eager_timing=Measurement((0.004,) * 10),
                      speedup_vs_eager=decision.speedups.speedup_vs_eager,
                      speedup_vs_compile=decision.speedups.speedup_vs_compile, withheld=decision.withheld)


def test_each_timing_integrity_finding_makes_a_passing_row_suspect():
    for code in sorted(SUSPECT_CODES):
        decision = _decided([f"[{code}] details"])
        assert decision.status == Status.SUSPECT, code
        assert decision.message == f"outputs pass, timing not trusted: [{code}] details"
        assert decision.speedups == Speedups()  # no speedup shown or counted ...
        assert decision.withheld == FOUR  # ... and the figures are kept, withheld


def test_heuristics_alone_never_change_a_verdict():
    decision = _decided(["[implausible_speed] 12x faster than eager", "[threads] a thread", "[caching] x"])
    assert decision == Decision(Status.CORRECT, "", FOUR)


def test_a_failing_row_stays_failing_and_shows_no_speedup():
    assert _decided(["[timer_mismatch] x"], status=Status.INCORRECT, message="differs") == Decision(
        Status.INCORRECT, "differs")


def _job(tmp_path, floor_=None, gain=None):
    return EvaluateJob(problem=ProblemRef("p", str(tmp_path / "p.py")), device="cuda", seed=0, trials=1, atol=1e-4,
                       rtol=1e-4, solution=SolutionRef("s", str(tmp_path / "s.py")), floor=floor_, compile_gain=gain)


def test_the_judge_decides_the_row_from_its_floor_and_its_samples(tmp_path):
    """The judge's last step (judge._decided) adds the floor's findings and decides: below the floor is `suspect`
    with its speedups withheld; far ahead of eager is a warning only; the speedup over torch.compile divides by the
    gain the reference's row measured."""
    fl = floor(Work(flops=1e9, bytes=1e9), Ceilings("GPU", 1e12, 1e15, "tf32", "now"))  # memory-bound: 1 ms

    def concluded(ms, eager_ms, floor_=fl):
        draft = Draft(Evaluation(timing=Measurement((ms / 1e3,) * 10, judge_samples=(ms / 1e3,) * 10),
                                 eager_timing=Measurement((eager_ms / 1e3,) * 10)))
        return judge._decided(_job(tmp_path, floor_, gain=2.0), draft, Status.CORRECT)

    plausible = concluded(2.0, 4.0)
    assert plausible.status == Status.CORRECT and plausible.warnings == ()
    assert plausible.percent_of_floor == pytest.approx(50.0)
    assert (plausible.speedup_vs_eager, plausible.speedup_vs_compile) == (pytest.approx(2.0), pytest.approx(1.0))
    too_fast = concluded(0.5, 4.0)
    assert too_fast.status == Status.SUSPECT and [w.code for w in too_fast.warnings] == [FindingCode.BELOW_FLOOR]
    assert too_fast.speedup_vs_eager is None and too_fast.withheld.speedup_vs_eager == pytest.approx(8.0)
    far_ahead = concluded(2.0, 40.0)
    assert far_ahead.status == Status.CORRECT and [w.code for w in far_ahead.warnings] == [FindingCode.IMPLAUSIBLE_SPEED]
    assert concluded(2.0, 4.0, floor_=None).percent_of_floor is None


def test_a_suspect_row_keeps_its_status_where_the_parent_makes_the_row():
    from kbench.commands.evaluation import with_next_step

    row = with_next_step(_row(_decided(["[state_changed] x"])), 60.0)
    assert row.status == Status.SUSPECT and row.withheld == FOUR and "next: docs/timing.md" in row.message


def test_a_reference_slowed_beside_the_solution_is_caught_against_its_calibration_neighbour():
    calm = Calibration({Regime.HOST: (0.0001,) * 10}, tuple(0.002 + i * 1e-6 for i in range(10)))
    slowed = Measurement(tuple(0.003 + i * 1e-6 for i in range(20)))
    steady = Measurement(tuple(0.002 + i * 1e-6 for i in range(20)))
    assert disturbed_warning(slowed, calm).code == "reference_disturbed"
    assert disturbed_warning(steady, calm) is None
    assert disturbed_warning(slowed, Calibration({Regime.HOST: (0.0001,) * 10})) is None  # nothing to compare with


def test_a_suspect_row_counts_as_failing_in_fast_p_and_the_geomean():
    honest = _row(_decided())
    suspect = _row(_decided(["[state_changed] x"]))
    assert fast_p([honest], 1.0) == 1.0 and fast_p([suspect], 0.0) == 0.0
    assert summarize([suspect]).geomean_eager is None


def test_the_gate_fails_a_suspect_row_with_its_reason():
    from kbench.commands.gate import FAIL, cpu_checks
    from kbench.results.records import SolutionSpec, TrialResult

    row = _row(_decided(["[clock_patched] it replaced time.perf_counter"]), device="cpu")
    row = dataclasses.replace(row, trials=(TrialResult(seed=1, passed=True),),
                              warnings=(from_legacy("[clock_patched] it replaced time.perf_counter"),))
    checks = cpu_checks(row, SolutionSpec("p", "fast", __import__("pathlib").Path("x.py"), ("cpu",)))
    failing = [c for c in checks if c.outcome == FAIL]
    assert [c.name for c in failing] == ["trusted timing"] and "clock_patched" in failing[0].message
