"""KernelBench's run layout in (`kbench import --kernelbench-run`) and its eval-results fields out (`kbench report
--format kernelbench`), on this repository's own KernelBench-format suite."""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbench.results.findings import Finding, FindingCode, from_legacy
from kbench.cli import app
from kbench.problems.kernelbench_runs import eval_results
from kbench.results.records import EAGER, Evaluation, Measurement, Status
from tests.conftest import FIXTURES

SUITE = FIXTURES / "suite"
RELU = (FIXTURES / "suite_solutions" / "05_relu" / "clamped.py").read_text()
KERNELBENCH = Path(os.environ.get("KBENCH_KERNELBENCH", ".kb/KernelBench"))


def _run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "my_run"
    run.mkdir(parents=True)
    (run / "level_1_problem_5_sample_0_kernel.py").write_text(RELU)
    (run / "level_1_problem_5_sample_3_kernel.py").write_text(RELU)
    (run / "level_1_problem_5_sample_0_prompt.txt").write_text("Write a faster ReLU")
    (run / "level_1_problem_77_sample_0_kernel.py").write_text(RELU)  # no problem 77
    (run / "level_1_problem_11_sample_0_kernel.py").write_text(RELU)  # 11_broken breaks the contract
    (run / "notes.py").write_text("x = 1\n")
    return run


def _import(run: Path, solutions: Path, *extra: str):
    return CliRunner().invoke(app, ["import", "--kernelbench-run", str(run), "--problems-dir", str(SUITE),
                                    "--solutions-dir", str(solutions), *extra])


def test_a_kernelbench_run_folder_maps_onto_the_problems_with_a_reason_for_each_file_it_cannot(tmp_path: Path):
    solutions = tmp_path / "solutions"
    done = _import(_run_folder(tmp_path), solutions)
    assert done.exit_code == 1, done.output  # some files could not be mapped
    assert sorted(p.name for p in (solutions / "05_relu").iterdir()) == ["sample_0.py", "sample_3.py"]
    imported = (solutions / "05_relu" / "sample_0.py").read_text()
    assert imported.startswith("# Imported by kbench from KernelBench run file level_1_problem_5_sample_0_kernel.py")
    assert RELU in imported
    out = done.output
    assert "level_1_problem_77_sample_0_kernel.py: no problem numbered 77 (level 1)" in out
    assert "level_1_problem_11_sample_0_kernel.py: its problem file is broken" in out
    assert "notes.py: not named level_<L>_problem_<P>_sample_<S>_kernel.py" in out
    assert "not imported: 1 file(s) of the run that are not kernels" in out


def test_importing_again_is_a_no_op_and_other_code_needs_force(tmp_path: Path):
    run, solutions = _run_folder(tmp_path), tmp_path / "solutions"
    _import(run, solutions)
    assert "imported" in _import(run, solutions).output  # the same code: written again, nothing lost
    (run / "level_1_problem_5_sample_0_kernel.py").write_text(RELU + "\n# changed\n")
    again = _import(run, solutions)
    assert "exists with other code; pass --force" in again.output
    assert "# changed" not in (solutions / "05_relu" / "sample_0.py").read_text()
    _import(run, solutions, "--force")
    assert "# changed" in (solutions / "05_relu" / "sample_0.py").read_text()


def test_a_kernelbench_run_excludes_response_files_and_needs_a_folder(tmp_path: Path):
    run = _run_folder(tmp_path)
    both = CliRunner().invoke(app, ["import", "x.md", "--kernelbench-run", str(run)])
    assert both.exit_code == 2 and "takes no response files" in both.output
    missing = CliRunner().invoke(app, ["import", "--kernelbench-run", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "is not a folder" in missing.output
    neither = CliRunner().invoke(app, ["import"])
    assert neither.exit_code == 2 and "--kernelbench-run" in neither.output


def test_a_kbench_run_exported_in_kernelbench_fields():
    timing = Measurement(samples=(1e-3, 2e-3, 3e-3))
    eager = Measurement(samples=(4e-3, 4e-3))
    rows = [
        Evaluation(problem="1_19_ReLU", solution=EAGER, status=Status.CORRECT, device="cuda", size="full", timing=eager),
        Evaluation(problem="1_19_ReLU", solution="sample_2", status=Status.CORRECT, device="cuda", size="full",
                   timing=timing, eager_timing=eager, speedup_vs_eager=2.0),
        Evaluation(problem="1_19_ReLU", solution="sample_0", status=Status.SUSPECT, device="cuda", size="full",
                   timing=timing, eager_timing=eager, warnings=(Finding(FindingCode.TIMER_MISMATCH, "x"),)),
        Evaluation(problem="1_19_ReLU", solution="sample_1", status=Status.COMPILE_ERROR, device="cuda", size="full"),
        Evaluation(problem="mine", solution="fast", status=Status.INCORRECT, device="cuda", size="full"),
    ]
    out = eval_results({"environment": {"gpu": {"name": "NVIDIA H100"}}}, rows)
    assert list(out) == ["19", "mine"]
    good, suspect, broken = out["19"]
    assert good["sample_id"] == 2 and good["compiled"] and good["correctness"]
    assert good["runtime"] == 2.0 and good["ref_runtime"] == 4.0  # milliseconds, mean, as KernelBench writes them
    assert good["runtime_stats"] == {"mean": 2.0, "std": 0.816, "min": 1.0, "max": 3.0, "num_trials": 3,
                                     "hardware": "NVIDIA H100"}
    assert suspect["correctness"] and suspect["runtime"] == -1.0  # outputs pass; the time is not trusted
    assert suspect["metadata"]["kbench_status"] == "suspect" and suspect["metadata"]["warnings"]
    assert not broken["compiled"] and not broken["correctness"] and broken["runtime"] == -1.0
    assert out["mine"][0]["sample_id"] == "fast"
    json.dumps(out)  # serialisable as it is
    two_levels = [Evaluation(problem=name, solution="sample_0", status=Status.CORRECT, device="cuda", size="full")
                  for name in ("1_19_ReLU", "3_19_MobileNetV1", "2_43_Conv3d")]
    assert sorted(eval_results({}, two_levels)) == ["1_19_ReLU", "3_19_MobileNetV1", "43"]


def test_report_format_kernelbench_writes_eval_results_beside_run_json(tmp_path: Path):
    args = ["run", "-p", "tiny", "-s", "good", "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir",
            str(FIXTURES / "solutions"), "--device", "cpu", "--no-compile-baseline", "--max-time", "0.05",
            "--trials", "1", "--results-dir", str(tmp_path)]
    assert CliRunner().invoke(app, args).exit_code == 0
    done = CliRunner().invoke(app, ["report", "--format", "kernelbench", "--results-dir", str(tmp_path)])
    assert done.exit_code == 0, done.output
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    doc = json.loads((run_dir / "eval_results.json").read_text())
    assert doc["tiny"][0]["sample_id"] == "good" and doc["tiny"][0]["correctness"] is True
    bad = CliRunner().invoke(app, ["report", "--format", "html", "--results-dir", str(tmp_path)])
    assert bad.exit_code == 2 and "Unknown report format" in bad.output


@pytest.mark.skipif(not (KERNELBENCH / "level1").is_dir(), reason="needs a KernelBench checkout's KernelBench/ folder "
                    "at .kb/KernelBench or $KBENCH_KERNELBENCH (fetch github:ScalingIntelligence/KernelBench)")
def test_a_run_folder_maps_onto_kernelbench_itself(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    for level, problem in ((1, 19), (2, 43), (3, 20)):
        (run / f"level_{level}_problem_{problem}_sample_0_kernel.py").write_text("class ModelNew: pass\n")
    done = CliRunner().invoke(app, ["import", "--kernelbench-run", str(run), "--problems-dir", str(KERNELBENCH),
                                    "--solutions-dir", str(tmp_path / "s")])
    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [
        "19_ReLU", "20_MobileNetV2", "43_Conv3d_Max_LogSumExp_ReLU"]
