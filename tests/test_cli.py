"""The command line through typer's CliRunner: help, listing, user mistakes, a small run."""

import json

from typer.testing import CliRunner

from kbench.cli import app
from kbench.results.header import selected_solutions
from tests.conftest import FIXTURES, ROOT

runner = CliRunner()
FIXTURE_DIRS = ["--problems-dir", str(FIXTURES / "problems"), "--solutions-dir", str(FIXTURES / "solutions")]


def test_help_shows_examples():
    result = runner.invoke(app, ["run", "--help"])
    assert result.exit_code == 0, result.output
    assert "kbench run --problem conv3d_logsumexp" in result.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("kbench ")


def test_list_shows_problems_tolerances_and_solution_devices():
    result = runner.invoke(app, ["list", "--problems-dir", str(ROOT / "problems"), "--solutions-dir", str(ROOT / "solutions")])
    assert result.exit_code == 0, result.output
    assert "convtranspose3d_softmax" in result.output and "atol=0.0001" in result.output
    assert "cuda_fused (cuda; fp32)" in result.output and "cpu_fused (cpu; fp32)" in result.output
    assert "triton_fused (cuda)" in result.output  # any precision: none named
    assert "batch_size 4->2" in result.output


def test_unknown_problem_is_one_line_and_exit_2(tmp_path):
    result = runner.invoke(app, ["run", "-p", "nope", "--problems-dir", str(ROOT / "problems"), "--results-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "[error] Unknown problem 'nope'. Available: conv3d_gelu" in result.output
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_missing_problems_folder_says_what_to_do(tmp_path):
    result = runner.invoke(app, ["list", "--problems-dir", str(tmp_path / "none")])
    assert result.exit_code == 2 and "pass --problems-dir" in result.output


def test_cuda_on_a_machine_without_gpu_is_refused(tmp_path):
    import torch

    if torch.cuda.is_available():
        return
    result = runner.invoke(app, ["run", "-p", "tiny", *FIXTURE_DIRS, "--device", "cuda", "--results-dir", str(tmp_path)])
    assert result.exit_code == 2 and "torch sees no GPU" in result.output


def test_bad_option_values_are_refused():
    result = runner.invoke(app, ["run", "--trials", "0"])
    assert result.exit_code == 2


def test_run_prints_the_table_and_writes_results(tmp_path):
    result = runner.invoke(app, [
        "run", "-p", "tiny", "-s", "good", *FIXTURE_DIRS, "--device", "cpu", "--no-compile-baseline",
        "--max-time", "0.2", "--trials", "2", "--results-dir", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c"),
        "--no-kernel-profile",
    ])
    assert result.exit_code == 0, result.output
    assert "good" in result.output and "correct" in result.output and "results:" in result.output
    (run_dir,) = (tmp_path / "r").iterdir()
    assert {p.name for p in run_dir.iterdir()} == {"run.json", "results.csv", "results.md"}
    assert json.loads((run_dir / "run.json").read_text())["config"]["kernel_profile"] is False


def test_solution_repeats_and_each_one_named_is_built(tmp_path):
    result = runner.invoke(app, ["build", "-p", "tiny", "-s", "good", "-s", "wrong_values", *FIXTURE_DIRS,
                                 "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "tiny       good" in result.output and "tiny       wrong_values" in result.output


def test_a_run_files_selection_names_its_solutions_in_either_form():
    assert selected_solutions({"solutions": ["a", "/x/b.py"]}) == ["a", "/x/b.py"]
    assert selected_solutions({"solutions": []}) == []
    assert selected_solutions({"solution": "a"}) == ["a"]  # written before -s could repeat
    assert selected_solutions({"solution": None}) == []


def test_build_reports_each_solution_and_refuses_an_empty_selection(tmp_path):
    result = runner.invoke(app, ["build", "-p", "tiny", "-s", "good", *FIXTURE_DIRS, "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "tiny       good" in result.output and " ok " in result.output
    empty = tmp_path / "none"
    (empty / "tiny").mkdir(parents=True)
    result = runner.invoke(app, ["build", "-p", "tiny", "--problems-dir", str(FIXTURES / "problems"),
                                 "--solutions-dir", str(empty), "--cache-dir", str(tmp_path)])
    assert result.exit_code == 2 and "No solutions selected" in result.output
