"""A solution whose kernel DSL is not installed here is not_run, naming the extra; kbench run exits 0 for it."""

import importlib.util

import pytest
from typer.testing import CliRunner

from kbench.build.compile import BuildResult
from kbench.cli import app
from kbench.commands import evaluation
from kbench.judge.candidate import loading
from kbench.judge.verdict import Verdict
from kbench.results.records import CompileInfo, SolutionSpec, Status
from kbench.results.storage import load_run
from tests.conftest import FIXTURES

runner = CliRunner()
SOLUTIONS = FIXTURES / "dsl_solutions"


@pytest.fixture(autouse=True)
def _no_tilelang():
    if importlib.util.find_spec("tilelang") is not None:
        pytest.skip("TileLang is installed here, so its solution runs")


def _run(tmp_path, *args):
    result = runner.invoke(app, [
        "run", "-p", "tiny", "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir", str(SOLUTIONS),
        "--device", "cpu", "--no-compile-baseline", "--max-time", "0.1", "--trials", "1", "--no-kernel-profile",
        "--results-dir", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c"), *args,
    ])
    (run_dir,) = (tmp_path / "r").iterdir()
    return result, {e.solution: e for e in load_run(run_dir)[1]}


def test_a_solution_in_a_missing_dsl_is_not_run_and_the_run_exits_0(tmp_path):
    result, rows = _run(tmp_path, "-s", "needs_tilelang")
    row = rows["needs_tilelang"]
    assert row.status == Status.NOT_RUN, row.message
    assert "TileLang" in row.message and "pip install 'kbench[tilelang]'" in row.message
    assert result.exit_code == 0, result.output
    assert "kbench[tilelang]" in result.output  # in the table's footnotes


def test_any_other_missing_module_stays_a_load_error(tmp_path):
    result, rows = _run(tmp_path)
    assert rows["needs_tilelang"].status == Status.NOT_RUN
    other = rows["needs_other_module"]
    assert other.status == Status.LOAD_ERROR and "kbench_no_such_module" in other.message
    assert result.exit_code == 1 and "(load_error): exit 1" in result.output


def test_only_the_message_for_a_dsl_missing_here_too_becomes_not_run(monkeypatch):
    message = loading.missing_backend(ModuleNotFoundError("no", name="tilelang.language"))
    assert message is not None and "kbench[tilelang]" in message
    assert loading.load_failure(Verdict("load_error", message)).status == "not_run"
    assert loading.load_failure(Verdict("load_error", "importing the solution raised X")).status == "load_error"
    assert loading.load_failure(Verdict("runtime_error", message)).status == "runtime_error"
    # A process that imported a solution claims a DSL is missing that kbench's own process finds: a load_error.
    monkeypatch.setitem(loading.BACKENDS, "json", ("JSON", "json"))
    claim = loading.missing_backend(ModuleNotFoundError("no", name="json"))
    assert loading.load_failure(Verdict("load_error", claim)).status == "load_error"


def test_a_build_that_failed_on_a_missing_dsl_is_not_run(tmp_path):
    message = loading.missing_backend(ModuleNotFoundError("no", name="tilelang"))
    spec = SolutionSpec(problem="tiny", name="s", path=tmp_path / "s.py", devices=("cpu",))
    failed = BuildResult(spec, False, "load_error", message, CompileInfo(ok=False))
    assert evaluation._failed_build(failed) == (Status.NOT_RUN, message)
    plain = BuildResult(spec, False, "load_error", "importing the solution raised X", CompileInfo(ok=False))
    assert evaluation._failed_build(plain) == (Status.LOAD_ERROR, "importing the solution raised X")
