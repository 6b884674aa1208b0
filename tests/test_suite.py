"""Whole folders of KernelBench-format files: one record per problem, broken files fail alone; resume; baseline."""

import json
import shutil

import pytest
from typer.testing import CliRunner

from kbench.cli import app
from kbench.results.records import EAGER, Status
from kbench.results.storage import load_run
from tests.conftest import FIXTURES

SUITE = FIXTURES / "suite"
runner = CliRunner()
ARGS = ["--problems-dir", str(SUITE), "--solutions-dir", str(FIXTURES / "suite_solutions"), "--device", "cpu",
        "--no-compile-baseline", "--max-time", "0.05", "--trials", "2", "--timeout", "120"]


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("suite")
    result = runner.invoke(app, ["run", *ARGS, "--results-dir", str(tmp / "results"), "--cache-dir", str(tmp / "cache")])
    assert result.exit_code == 1, result.output  # the suite's broken problem files are load_error rows
    assert "row(s) not correct (" in result.output and "load_error" in result.output.splitlines()[-1]
    (run_dir,) = (tmp / "results").iterdir()
    return tmp, run_dir


def test_every_file_gets_a_record_and_broken_ones_fail_alone(suite_run):
    _, run_dir = suite_run
    doc, evaluations = load_run(run_dir)
    eager = {e.problem: e for e in evaluations if e.solution == EAGER}
    assert len(eager) == 12 and doc["state"] == "complete"
    assert eager["11_broken"].status == Status.LOAD_ERROR and "get_init_inputs" in eager["11_broken"].message
    assert eager["12_raises"].status == Status.RUNTIME_ERROR and "broken at run time" in eager["12_raises"].message
    fine = [name for name, e in eager.items() if e.status == Status.CORRECT]
    assert len(fine) == 10, {n: (e.status, e.message) for n, e in eager.items()}
    assert eager["04_max_argmax"].diagnostics.output.dtype == "torch.float32"


def test_solutions_are_matched_by_problem_name(suite_run):
    _, run_dir = suite_run
    solutions = {(e.problem, e.solution): e for e in load_run(run_dir)[1] if e.solution != EAGER}
    assert solutions[("05_relu", "clamped")].status == Status.CORRECT
    assert solutions[("01_matmul", "transposed")].status == Status.INCORRECT
    assert len(solutions) == 2


def test_resume_runs_only_what_is_missing(suite_run):
    tmp, run_dir = suite_run
    copy = tmp / "results" / "20000101-000000-beef"
    shutil.copytree(run_dir, copy)
    doc = json.loads((copy / "run.json").read_text())
    kept = doc["evaluations"][:5]
    doc["evaluations"], doc["state"] = kept, "interrupted"
    (copy / "run.json").write_text(json.dumps(doc))
    result = runner.invoke(app, ["run", *ARGS, "--results-dir", str(tmp / "results"), "--cache-dir", str(tmp / "cache"),
                                 "--resume", copy.name])
    assert result.exit_code == 1, result.output
    resumed_doc, resumed = load_run(copy)
    assert resumed_doc["state"] == "complete" and resumed_doc["run_id"] == doc["run_id"]
    assert len(resumed) == len(load_run(run_dir)[1])
    assert [e["seconds"] for e in resumed_doc["evaluations"][:5]] == [e["seconds"] for e in kept]  # not rerun
    assert {(e.problem, e.solution) for e in resumed} == {(e.problem, e.solution) for e in load_run(run_dir)[1]}


def test_resume_of_an_unknown_run_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["run", *ARGS, "--results-dir", str(tmp_path), "--resume", "nope"])
    assert result.exit_code == 2 and "No run or baseline 'nope'" in result.output


def test_baseline_times_only_the_references(tmp_path):
    result = runner.invoke(app, ["baseline", "--problems-dir", str(SUITE), "-p", "05_relu", "-p", "07_layernorm",
                                 "--device", "cpu", "--no-compile-baseline", "--max-time", "0.05",
                                 "--results-dir", str(tmp_path), "--name", "Suite CPU"])
    assert result.exit_code == 0, result.output
    doc, evaluations = load_run(tmp_path / "baselines" / "suite-cpu.json")
    assert [(e.problem, e.solution, e.status) for e in evaluations] == [
        ("05_relu", EAGER, Status.CORRECT), ("07_layernorm", EAGER, Status.CORRECT)]

    # Cut short after its first reference, it is finished by --resume alone: its folder and problems are its own.
    (run_dir,) = [p for p in tmp_path.iterdir() if p.name != "baselines"]
    cut = json.loads((run_dir / "run.json").read_text())
    cut["evaluations"], cut["state"] = cut["evaluations"][:1], "interrupted"
    (run_dir / "run.json").write_text(json.dumps(cut))
    again = runner.invoke(app, ["baseline", "--resume", run_dir.name, "--results-dir", str(tmp_path), "--name", "again"])
    assert again.exit_code == 0, again.output
    assert "05_relu: reference" not in again.output and "07_layernorm: reference" in again.output
    _, finished = load_run(tmp_path / "baselines" / "again.json")
    assert [(e.problem, e.solution) for e in finished] == [("05_relu", EAGER), ("07_layernorm", EAGER)]


def test_a_refused_resume_leaves_the_interrupted_run_as_it_was(suite_run):
    tmp, run_dir = suite_run
    copy = tmp / "results" / "20000101-000001-cafe"
    shutil.copytree(run_dir, copy)
    doc = json.loads((copy / "run.json").read_text())
    doc["environment"]["torch"], doc["state"] = "0.0.1", "interrupted"
    (copy / "run.json").write_text(json.dumps(doc))
    before = (copy / "run.json").read_text()
    result = runner.invoke(app, ["run", *ARGS, "--results-dir", str(tmp / "results"), "--resume", copy.name])
    assert result.exit_code == 2 and "Start a new run instead" in result.output
    assert (copy / "run.json").read_text() == before


def test_resume_alone_finishes_the_runs_own_selection(tmp_path):
    """`kbench run --resume ID` with no other options evaluates what the interrupted run asked for, no more."""
    cache = tmp_path / "cache"
    chosen = ["--problems-dir", str(SUITE), "--solutions-dir", str(FIXTURES / "suite_solutions"), "-p", "05_relu",
              "-p", "08_softmax", "--device", "cpu", "--no-compile-baseline", "--max-time", "0.05", "--trials", "2"]
    result = runner.invoke(app, ["run", *chosen, "--results-dir", str(tmp_path / "results"), "--cache-dir", str(cache)])
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "results").iterdir()
    doc = json.loads((run_dir / "run.json").read_text())
    full = {(e["problem"], e["solution"]) for e in doc["evaluations"]}
    assert full == {("05_relu", EAGER), ("05_relu", "clamped"), ("08_softmax", EAGER)}
    doc["evaluations"], doc["state"] = doc["evaluations"][:1], "interrupted"
    (run_dir / "run.json").write_text(json.dumps(doc))

    result = runner.invoke(app, ["run", "--resume", run_dir.name, "--results-dir", str(tmp_path / "results")])
    assert result.exit_code == 0, result.output
    resumed_doc, resumed = load_run(run_dir)
    assert resumed_doc["state"] == "complete"
    assert {(e.problem, e.solution) for e in resumed} == full

    again = runner.invoke(app, ["run", "--resume", run_dir.name, "-p", "05_relu", "--results-dir", str(tmp_path / "results")])
    assert again.exit_code == 2 and "leave out -p" in again.output
