"""The CI gate: exit codes, failure lines with a reproduce command, JUnit XML, GPU-mode check logic."""

import xml.etree.ElementTree as ET

from typer.testing import CliRunner

from kbench.cli import app
from kbench.commands.gate import Check, cuda_checks, FAIL, GateResult, junit_xml, PASS, SKIP
from kbench.results.records import CompileInfo, Evaluation, Status, TrialResult
from tests.conftest import FIXTURES

runner = CliRunner()


def _gate(tmp_path, *args, solutions=FIXTURES / "solutions"):
    return runner.invoke(app, [
        "gate", "-p", "tiny", "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir", str(solutions),
        "--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache"), "--max-time", "0.1",
        "--trials", "2", "--junit", str(tmp_path / "gate.xml"), *args,
    ])


def test_all_pass_exits_0_and_says_what_was_not_checked(tmp_path):
    result = _gate(tmp_path, "-s", "good")
    assert result.exit_code == 0, result.output
    assert "gate PASSED (cpu): 1 passed, 0 failed" in result.output
    assert "not checked here: no GPU here" in result.output


def test_one_incorrect_solution_fails_with_a_reproduce_line(tmp_path):
    result = _gate(tmp_path, "-s", "wrong_values")
    assert result.exit_code == 1
    assert "FAIL tiny/wrong_values correct@small: incorrect at size small" in result.output
    assert "reproduce: kbench run -p tiny -s wrong_values --device cpu --size small" in result.output
    suite = ET.parse(tmp_path / "gate.xml").getroot().find("testsuite")
    (case,) = suite.findall("testcase")
    assert case.get("classname") == "kbench.tiny" and case.get("name") == "wrong_values::correct@small"
    assert "incorrect at size small" in case.find("failure").get("message")
    assert suite.get("failures") == "1" and suite.get("tests") == "1"


def test_a_compile_failure_fails_the_gate(tmp_path):
    result = _gate(tmp_path, solutions=FIXTURES / "gate_solutions")
    assert result.exit_code == 1, result.output
    assert "FAIL tiny/compile_error correct@small: compile_error:" in result.output
    assert "undefined_symbol" in result.output


def test_zero_selected_solutions_never_pass(tmp_path):
    empty = tmp_path / "no_solutions"
    empty.mkdir()
    result = _gate(tmp_path, solutions=empty)
    assert result.exit_code == 1 and "never passes on zero checks" in result.output


def _cuda_eval(trials_ok=True, small_ok=True, compile_ok=True, small=True):
    trial = TrialResult(seed=1, passed=trials_ok, message="" if trials_ok else "3 of 8 elements outside")
    small_trials = (TrialResult(seed=2, passed=small_ok, message="" if small_ok else "shape (8,) != (4,)"),)
    status = Status.CORRECT if trials_ok and small_ok else Status.INCORRECT
    if not compile_ok:
        return Evaluation(problem="p", solution="s", status=Status.COMPILE_ERROR, device="cuda", size="full",
                          message="error: expected ';'", compile=CompileInfo(ok=False))
    return Evaluation(problem="p", solution="s", status=status, device="cuda", size="full", trials=(trial,),
                      size_checks={"small": small_trials} if small else {}, compile=CompileInfo(ok=True))


def test_gpu_checks_cover_build_full_and_small_size():
    assert [(c.name, c.outcome) for c in cuda_checks(_cuda_eval())] == [
        ("build", PASS), ("correct@full", PASS), ("correct@small", PASS)]
    small_fails = cuda_checks(_cuda_eval(small_ok=False))
    assert small_fails[-1].outcome == FAIL and "incorrect at size small: shape" in small_fails[-1].message
    assert "--two-sizes" in small_fails[-1].reproduce
    assert [c.outcome for c in cuda_checks(_cuda_eval(trials_ok=False))] == [PASS, FAIL]
    assert [(c.name, c.outcome) for c in cuda_checks(_cuda_eval(compile_ok=False))] == [("build", FAIL)]
    assert cuda_checks(_cuda_eval(small=False))[-1].outcome == SKIP


def test_on_a_gpu_a_solution_this_machine_cannot_run_is_skipped_with_its_reason_not_failed():
    """On an H100 without TileLang and CuTe DSL the gate failed on their two solutions: `not_run` rows (a kernel DSL
    missing here) read as build and correctness failures."""
    missing = Evaluation(problem="p", solution="tilelang_fused", status=Status.NOT_RUN, device="cuda", size="full",
                         message="needs tilelang, which is not installed here: pip install 'kbench[tilelang]'",
                         compile=CompileInfo(ok=False))
    (check,) = cuda_checks(missing)
    assert check.outcome == SKIP and "not installed here" in check.message
    result = GateResult("gpu", (check, *cuda_checks(_cuda_eval())), (), ())
    assert result.passed and result.count(FAIL) == 0 and result.count(SKIP) == 1


def test_a_gate_with_only_skipped_checks_does_not_pass():
    result = GateResult("cpu", (Check("p", "s", "build", SKIP, "no toolkit"),), (), ())
    assert not result.passed
    assert not GateResult("cpu", (), (), ()).passed
    assert GateResult("gpu", (Check("p", "s", "build", PASS),), (), ()).passed


def test_junit_marks_skips():
    xml = junit_xml(GateResult("cpu", (Check("p", "s", "build", SKIP, "no toolkit"), Check("p", "t", "build", PASS)), (), ()))
    suite = ET.fromstring(xml).find("testsuite")
    assert suite.get("skipped") == "1" and suite.find("testcase/skipped").get("message") == "no toolkit"
