"""The judge's and the candidate's processes must run the same call at the same speed before a speedup is divided.

Calibration times the reference itself in both processes before the solution is imported. When they disagree beyond
the honest-copy band, the solution goes into a fresh candidate process instead, and a row whose every candidate
process disagreed is `suspect` (`[processes_disagree]`). On a 4-GPU machine an honest copy read 0.77x, `correct`:
its candidate's process ran the reference at 6.4 ms, the judge's at 4.9 ms (issue: suites at scale).
"""

from __future__ import annotations

import pytest

from kbench.judge import judge
from kbench.judge.timing import checks
from kbench.judge.timing.checks import Calibration
from kbench.results.findings import FindingCode
from kbench.wire.jobs import EvaluateJob, ProblemRef, SolutionRef
from tests.conftest import FIXTURES

HERE = FIXTURES / "process_speed"
ONE_OP = FIXTURES / "solutions" / "one_op" / "honest.py"  # the same one multiplication, as a solution
EAGER = (1.00e-3, 1.01e-3, 0.99e-3, 1.00e-3, 1.02e-3, 0.98e-3, 1.00e-3, 1.01e-3)


def _calibration(scale: float, eager: tuple[float, ...] = EAGER) -> Calibration:
    return Calibration(eager=eager, reference=tuple(scale * t for t in eager), eager_regime="gpu")


@pytest.mark.parametrize("scale, disagree", [(1.0, False), (1.02, False), (0.98, False), (1.05, True),
                                             (1.30, True), (0.77, True)])
def test_the_processes_disagree_outside_the_honest_copy_band(scale, disagree):
    ratio = checks.processes_disagree(_calibration(scale))
    assert (ratio is not None) == disagree
    if disagree:
        assert ratio == pytest.approx(scale, rel=1e-6)


def test_a_gap_within_the_noise_is_no_disagreement():
    """Two interleaved sets of samples 4% apart by their medians but not significantly: no verdict on noise."""
    judge_side = (1.0e-3, 1.1e-3, 0.9e-3, 1.2e-3, 0.8e-3, 1.0e-3)
    cand = (1.04e-3, 0.85e-3, 1.25e-3, 0.95e-3, 1.15e-3, 1.05e-3)
    assert checks.processes_disagree(Calibration(eager=judge_side, reference=cand)) is None


def test_too_few_samples_decide_nothing():
    assert checks.processes_disagree(_calibration(2.0, EAGER[:4])) is None
    assert checks.process_ratio(_calibration(2.0, EAGER[:4])) is None


def _job(device: str = "cuda") -> EvaluateJob:
    return EvaluateJob(problem=ProblemRef("p", str(HERE / "model.py"), {}), device=device, seed=1, trials=1,
                       atol=1e-4, rtol=1e-4, solution=SolutionRef("honest", str(ONE_OP)))


def _scripted(scales: list[float]):
    """`_calibrated`'s two callables, scripted: each calibration's ratio in turn; and the sessions they saw."""
    seen: list[str] = []
    left = iter(scales)

    def calibrate_in(session):
        seen.append(session)
        return _calibration(next(left))

    def fresh(session):
        return f"fresh after {session}"

    return seen, calibrate_in, fresh


def test_a_candidate_process_that_disagrees_is_replaced_before_the_solution_is_imported():
    seen, calibrate_in, fresh = _scripted([1.3, 1.0])
    session, _, check, finding = judge._calibrated(_job(), "first", fresh, calibrate_in)
    assert seen == ["first", "fresh after first"] and session == "fresh after first"
    assert finding is None and check.fresh_candidates == 1
    assert check.ratios == (pytest.approx(1.3), pytest.approx(1.0))


def test_a_row_that_draws_its_memory_records_the_calibrations_ratio_and_acts_later():
    """One draw of memory per side says nothing where the call's speed moves with it (timing.placement): the check
    after the solution's rounds compares each side's fastest draws instead."""
    seen, calibrate_in, fresh = _scripted([1.3, 1.0])
    session, _, check, finding = judge._calibrated(_job(), "first", fresh, calibrate_in, draws=True)
    assert seen == ["first"] and session == "first" and finding is None
    assert check.ratios == (pytest.approx(1.3),) and not check.disagrees


def test_a_row_whose_every_candidate_process_disagrees_is_suspect():
    seen, calibrate_in, fresh = _scripted([1.3] * (judge.PROCESS_RETRIES + 1))
    _, _, _, finding = judge._calibrated(_job(), "first", fresh, calibrate_in)
    assert len(seen) == judge.PROCESS_RETRIES + 1
    assert finding is not None and finding.code == FindingCode.PROCESSES_DISAGREE
    assert finding.code.suspect and "1.300x" in finding.message


def test_on_the_cpu_the_ratio_is_recorded_and_nothing_retried():
    seen, calibrate_in, fresh = _scripted([1.3])
    _, _, check, finding = judge._calibrated(_job("cpu"), "first", fresh, calibrate_in)
    assert seen == ["first"] and finding is None and check.ratios == (pytest.approx(1.3),)


def _quiet(event, **fields):
    pass


@pytest.fixture
def checked_on_the_cpu(monkeypatch):
    """The judge acts on a disagreement on the CPU too (it only records it there), so real processes can show it."""
    monkeypatch.setattr(judge, "PROCESS_CHECKED", ("cpu",))


@pytest.fixture
def fast_after_the_first(monkeypatch):
    """Every candidate process after the first is started with KBENCH_TEST_FAST set (it inherits the judge's
    environment, set just before the fresh one is spawned)."""
    real = judge._fresh_session

    def fresh(*args, **kwargs):
        monkeypatch.setenv("KBENCH_TEST_FAST", "1")
        return real(*args, **kwargs)

    monkeypatch.delenv("KBENCH_TEST_FAST", raising=False)
    monkeypatch.setattr(judge, "_fresh_session", fresh)


def test_the_judge_retimes_in_fresh_processes_until_one_agrees(checked_on_the_cpu, fast_after_the_first):
    """The problem's reference is slow only in the first candidate process: the solution goes into the second."""
    result = judge.judge_solution(_job("cpu"), {}, _quiet)
    processes = result.diagnostics.processes
    assert processes.fresh_candidates == 1, processes
    assert processes.ratios[0] > 2 and abs(processes.ratios[1] - 1) < 0.5, processes
    assert FindingCode.PROCESSES_DISAGREE not in [w.code for w in result.warnings]


def test_the_judge_flags_a_row_whose_candidate_processes_all_disagree(checked_on_the_cpu, monkeypatch):
    monkeypatch.delenv("KBENCH_TEST_FAST", raising=False)
    result = judge.judge_solution(_job("cpu"), {}, _quiet)
    assert result.diagnostics.processes.fresh_candidates == judge.PROCESS_RETRIES
    assert FindingCode.PROCESSES_DISAGREE in [w.code for w in result.warnings]


def _observed(timed: float, regime: str = "host"):
    from kbench.judge.timing.timed_call import Observed

    return Observed(timed=timed, window=timed + 3e-4, arm=1e-4, issue=timed * 0.9, regime=regime, done=timed + 2e-4)


def test_a_host_regime_reference_is_divided_by_the_witness_of_the_same_rounds():
    """A launch-bound call's time is the host's, and the judge's process issued it 2-4% slower than candidate
    processes on the H100: the speedup of a row whose reference the judge times in the host regime divides by the
    witness (a candidate's kind of process holding only the reference), timed in the same rounds and protocol."""
    from kbench.judge.timing import judge_timing
    from kbench.results.records import Measurement

    eager = Measurement((1.03e-3,) * 12, stop_reason="converged", regime="host")
    seen = [_observed(1.0e-3 + i * 1e-6) for i in range(12)]
    divisor = judge_timing.divided_by_witness(seen, Calibration(eager_regime="host"), eager)
    assert divisor is not None and divisor.regime == "host" and divisor.stop_reason == "converged"
    assert divisor.samples == tuple(o.timed for o in seen) and divisor.judge_samples == tuple(o.done for o in seen)
    assert judge_timing.divided_by_witness(seen, Calibration(eager_regime="gpu"), eager) is None  # processes agree
    too_few = seen[: judge_timing.CALIBRATION_ROUNDS[0] - 1]
    assert judge_timing.divided_by_witness(too_few, Calibration(eager_regime="host"), eager) is None
    gated = [_observed(1e-3, "gpu") for _ in range(12)]  # the solution in the GPU regime: the witness's calls too
    assert judge_timing.divided_by_witness(gated, Calibration(eager_regime="host"), eager) is None  # not host ones
    # ... and the row divides by them, not by the judge's host-regime eager (a host time over a GPU time)
    divisor = judge_timing.divided_by_witness(gated, Calibration(eager_regime="host"), eager, regime="gpu")
    assert divisor is not None and divisor.regime == "gpu" and divisor.median == 1e-3


def test_in_the_host_regime_the_judges_disagreement_is_recorded_not_acted_on():
    seen, calibrate_in, fresh = _scripted([0.96])
    real = calibrate_in

    def host(session):
        return Calibration(eager=real(session).eager, reference=tuple(0.96 * t for t in EAGER), eager_regime="host")

    _, _, check, finding = judge._calibrated(_job("cuda"), "first", fresh, host)
    assert seen == ["first"] and finding is None and check.ratios == (pytest.approx(0.96),)


LIVE = HERE / "live.py"
SLOWS = FIXTURES / "process_speed_solutions" / "slows_its_process.py"  # apart: a sandbox shows a solution only its own folder


@pytest.fixture
def after_on_the_cpu(monkeypatch):
    """The check after the solution's rounds runs on the CPU too (on CUDA only for a reference of AFTER_MIN_BYTES)."""
    monkeypatch.setattr(judge, "AFTER_CHECKED", ("cpu",))
    monkeypatch.delenv("KBENCH_TEST_SLOW_NOW", raising=False)


def _live_job(solution) -> EvaluateJob:
    return EvaluateJob(problem=ProblemRef("p", str(LIVE), {}), device="cpu", seed=1, trials=1, atol=1e-4, rtol=1e-4,
                       solution=SolutionRef("s", str(solution)))


def test_the_reference_timed_again_after_the_solutions_rounds_agrees_for_an_honest_copy(after_on_the_cpu,
                                                                                        checked_on_the_cpu):
    result = judge.judge_solution(_live_job(ONE_OP), {}, _quiet)
    processes = result.diagnostics.processes
    assert processes.after is not None and abs(processes.after - 1) < 0.3, processes

    assert FindingCode.PROCESSES_DISAGREE not in [w.code for w in result.warnings], result.warnings


def test_a_reference_slower_in_the_candidates_process_after_the_solutions_rounds_makes_the_row_suspect(
        after_on_the_cpu, checked_on_the_cpu, monkeypatch):
    """Before the import both processes run the reference at 2 ms; the solution's import slows it to 5 ms in its
    process, where its own calls stay at 2 ms. The check before the import cannot see that; the kept reference, timed
    there after the solution's rounds, does. The solution is timed again in fresh processes, AFTER_RETRIES of them;
    where each disagrees as the first did, the row is `suspect`, and the ratio is recorded."""
    monkeypatch.delenv("KBENCH_TEST_FAST", raising=False)
    result = judge.judge_solution(_live_job(SLOWS), {}, _quiet)
    processes = result.diagnostics.processes
    assert all(abs(r - 1) < 0.3 for r in processes.ratios), processes  # before the import: every process agreed
    assert processes.after_retries == judge.AFTER_RETRIES == processes.fresh_candidates, processes
    assert processes.after > 2 and processes.after_disagrees, processes  # the kept reference was timed, not the
    # solution's 2 ms calls, in the last of the fresh processes too
    assert abs(result.timing.median / result.eager_timing.median - 1) < 0.3
    found = [w for w in result.warnings if w.code == FindingCode.PROCESSES_DISAGREE]
    assert found and "after the solution's rounds" in found[0].message, result.warnings
    assert result.status == "suspect"


def test_without_the_check_the_candidate_keeps_no_reference(monkeypatch):
    monkeypatch.delenv("KBENCH_TEST_SLOW_NOW", raising=False)
    result = judge.judge_solution(_live_job(SLOWS), {}, _quiet)
    assert result.diagnostics.processes.after is None
    assert FindingCode.PROCESSES_DISAGREE not in [w.code for w in result.warnings]


def test_a_fresh_process_that_agrees_after_the_solutions_rounds_gives_the_row_its_speedup(after_on_the_cpu,
                                                                                         checked_on_the_cpu,
                                                                                         fast_after_the_first):
    """The solution's import slows the reference only in the first candidate process: its rows are timed again in a
    fresh one, where the kept reference agrees with the judge's, and the row is `correct` with that process's
    figures."""
    result = judge.judge_solution(_live_job(SLOWS), {}, _quiet)
    processes = result.diagnostics.processes
    assert processes.after_retries == 1 and processes.fresh_candidates == 1, processes
    assert abs(processes.after - 1) < 0.3 and not processes.after_disagrees, processes
    assert FindingCode.PROCESSES_DISAGREE not in [w.code for w in result.warnings], result.warnings
    assert result.status == "correct" and abs(result.speedup_vs_eager - 1) < 0.3, (result.status, result.warnings)


def test_the_kept_references_calls_add_nothing_to_the_solutions_peak_memory(monkeypatch):
    """The check's untimed calls of the kept reference report their peak as any call does; the row's figure for the
    solution (`Session.peak_bytes`) stays the solution's."""
    from kbench.judge.timing import judge_timing

    class FakeSession:
        peak_bytes = 123  # the solution's, from its own calls

        def bind(self, name, values, outputs=None):
            self.bound = name

        def call(self):
            self.peak_bytes = max(self.peak_bytes, 10**9)  # as Session.call does with the reference's reply

    class FakeCalls:
        def __init__(self, session, atol, rtol):
            pass

        def sample(self, regime, values, expected, label):
            return _observed(1e-3)

        def close(self):
            pass

    monkeypatch.setattr(judge_timing, "TimedCalls", FakeCalls)
    session = FakeSession()
    found = judge_timing.after(_live_job(ONE_OP), session, lambda x: x * 2, lambda seed: [float(seed)])
    assert session.bound == "calibration" and session.peak_bytes == 123
    assert len(found.reference) == judge_timing.AFTER_ROUNDS - judge_timing.CALIBRATION_DISCARD


class _ForcedCalls:
    """TimedCalls whose first `forced` calls wait for the GPU while issued (the judge opens their gates), then 1 ms."""

    left = 0

    def __init__(self, session, atol, rtol):
        pass

    def sample(self, regime, values, expected, label):
        from kbench.judge.timing.timed_call import Observed

        if _ForcedCalls.left:
            _ForcedCalls.left -= 1
            return Observed(0.0, 0.0, 1.0, 1e-3, regime, forced=True)
        return _observed(1e-3, regime)

    def close(self):
        pass


class _BoundSession:
    peak_bytes = 0

    def bind(self, name, values, outputs=None):
        pass

    def call(self):
        pass


def _after_with_forced(monkeypatch, forced: int):
    from kbench.judge.timing import judge_timing

    monkeypatch.setattr(judge_timing, "TimedCalls", _ForcedCalls)
    _ForcedCalls.left = forced
    return judge_timing.after(_live_job(ONE_OP), _BoundSession(), lambda x: x * 2, lambda seed: [float(seed)])


def test_a_call_of_the_check_after_the_rounds_that_waits_for_the_gpu_is_left_out_and_the_check_goes_on(monkeypatch):
    """On one H200 the check's first call waited for the GPU while issued, which dropped its only regime: the check
    ended with no ratio and no finding, and #77's honest copy stayed `correct` at 0.77x. A round whose call the judge
    had to open is now left out and the next takes its place."""
    from kbench.judge.timing import judge_timing

    found = _after_with_forced(monkeypatch, 1)
    assert found.forced == 1
    assert len(found.reference) == len(found.eager) == judge_timing.AFTER_ROUNDS - judge_timing.CALIBRATION_DISCARD
    assert checks.process_ratio(found) is not None  # what the check compares (here a fake 1 ms over a real eager)


def test_a_check_after_the_rounds_whose_calls_keep_waiting_stops_and_says_it_measured_nothing(monkeypatch):
    from kbench.judge.timing import judge_timing

    found = _after_with_forced(monkeypatch, 100)
    assert found.forced == judge_timing.AFTER_FORCED and found.reference == () and found.eager == ()
    assert checks.process_ratio(found) is None
    warning = checks.after_unmeasured_warning(found)
    assert warning.code == FindingCode.PROCESSES_UNCHECKED and warning.code.suspect
    assert f"{judge_timing.AFTER_FORCED} of its calls waited for the GPU" in warning.message


def test_a_row_whose_check_after_the_rounds_measures_nothing_is_retimed_then_suspect(after_on_the_cpu,
                                                                                      checked_on_the_cpu, monkeypatch):
    """A check that could not tell is not a pass: the solution is timed again in fresh candidate processes, as for a
    disagreement, and a row whose last process still could not be checked is `suspect` with no speedup."""
    from kbench.judge.timing import judge_timing

    calls: list[int] = []

    def unmeasured(job, session, reference, make, placed=False):
        calls.append(1)
        return Calibration(eager_regime="host", forced=judge_timing.AFTER_FORCED)

    monkeypatch.setattr(judge, "after", unmeasured)
    result = judge.judge_solution(_live_job(ONE_OP), {}, _quiet)
    processes = result.diagnostics.processes
    assert len(calls) == judge.AFTER_RETRIES + 1 and processes.after_retries == judge.AFTER_RETRIES, processes
    assert processes.after is None and processes.after_unmeasured and not processes.after_disagrees, processes
    assert [w.code for w in result.warnings].count(FindingCode.PROCESSES_UNCHECKED) == 1, result.warnings
    assert result.status == "suspect" and result.speedup_vs_eager is None


def test_a_row_whose_check_measures_in_a_fresh_process_gets_its_speedup(after_on_the_cpu, checked_on_the_cpu,
                                                                          monkeypatch):
    from kbench.judge.timing import judge_timing

    real, calls = judge.after, []

    def first_unmeasured(job, session, reference, make, placed=False):
        calls.append(1)
        if len(calls) == 1:
            return Calibration(eager_regime="host", forced=judge_timing.AFTER_FORCED)
        return real(job, session, reference, make, placed)

    monkeypatch.setattr(judge, "after", first_unmeasured)
    result = judge.judge_solution(_live_job(ONE_OP), {}, _quiet)
    processes = result.diagnostics.processes
    assert len(calls) == 2 and processes.after_retries == 1 and not processes.after_unmeasured, processes
    assert processes.after is not None and FindingCode.PROCESSES_UNCHECKED not in [w.code for w in result.warnings]
    assert result.status == "correct", result.warnings
