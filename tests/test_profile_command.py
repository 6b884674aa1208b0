"""kbench profile without a GPU: the target under a stand-in for ncu, timeouts, the CLI, run.json and the HTML."""

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbench.cli import app
from kbench.commands import profile as profile_command
from kbench.config.run_config import RunConfig
from kbench.errors import ProfileError
from kbench.problems.discovery import find_problem
from kbench.profile import ncu, runner
from kbench.profile.jobs import TargetJob
from kbench.reports import profile_view
from kbench.reports.html import report_html
from kbench.results import schema
from kbench.results.profiles import ModelProfile, profiles_of
from kbench.results.storage import RunStore, load_run
from kbench.wire.jobs import ProblemRef
from tests.conftest import FIXTURES, ROOT

SAMPLES = FIXTURES / "ncu"
# A stand-in for ncu: runs the target command it is given (what follows the python), then prints a captured CSV.
FAKE_NCU = f"""#!{sys.executable}
import os, subprocess, sys, time
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion fake.1")
    sys.exit(0)
if os.environ.get("FAKE_NCU_HANG"):
    open(os.environ["FAKE_NCU_HANG"], "w").write(str(os.getpid()))
    time.sleep(600)
target = args[args.index({sys.executable!r}):]
code = subprocess.run(target).returncode
print("==PROF== Disconnected from process 1")
sys.stdout.write(open(os.environ["FAKE_NCU_CSV"]).read())
sys.exit(code)
"""


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    path = tmp_path / "ncu"
    path.write_text(FAKE_NCU)
    path.chmod(0o755)
    monkeypatch.setenv("FAKE_NCU_CSV", str(SAMPLES / "convtranspose3d_softmax_tf32_igemm.csv"))
    return path


def _job(solution):
    problem = find_problem("tiny", FIXTURES / "problems")
    ref = ProblemRef(problem.name, str(problem.path), problem.overrides("small"))
    return TargetJob(ref, str(FIXTURES / "solutions" / "tiny" / f"{solution}.py") if solution else None, 42,
                     device="cpu")


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("solution", [None, "good"])
def test_the_target_runs_its_model_under_ncu_and_the_csv_becomes_the_profile(fake_ncu, solution):
    found = runner.profile_model(fake_ncu, _job(solution), _env(), 120, "tiny", solution or "eager",
                                 runner.tool_version(fake_ncu))
    assert len(found.kernels) == 4 and found.total_ns == pytest.approx(352_672)
    assert found.tool == "Version fake.1" and found.solution == (solution or "eager")
    assert found.sandbox == "" if solution is None else found.sandbox.startswith(("limits", "none"))


@pytest.mark.parametrize("solution, words", [("raises_in_forward", "runtime_error: the model raised"),
                                             ("raises_on_import", "load_error"), ("no_modelnew", "ModelNew")])
def test_a_failing_target_is_one_line_of_profile_error(fake_ncu, solution, words):
    with pytest.raises(ProfileError) as caught:
        runner.profile_model(fake_ncu, _job(solution), _env(), 120, "tiny", solution)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_ncu_that_profiles_nothing_says_so(fake_ncu, tmp_path, monkeypatch):
    empty = tmp_path / "empty.csv"
    empty.write_text("==WARNING== No kernels were profiled.\n")
    monkeypatch.setenv("FAKE_NCU_CSV", str(empty))
    with pytest.raises(ProfileError, match="no kernel of tiny/eager: ==WARNING== No kernels were profiled"):
        runner.profile_model(fake_ncu, _job(None), _env(), 120, "tiny", "eager")


def test_a_hanging_ncu_is_killed_at_the_timeout_and_the_parent_goes_on(fake_ncu, tmp_path, monkeypatch):
    pid_file = tmp_path / "pid"
    monkeypatch.setenv("FAKE_NCU_HANG", str(pid_file))
    start = time.monotonic()
    with pytest.raises(ProfileError, match="ran past --timeout"):
        runner.profile_model(fake_ncu, _job(None), _env(), 2, "tiny", "eager")
    assert time.monotonic() - start < 30
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _profiles():
    return [ModelProfile("convtranspose3d_softmax", name, tuple(ncu.parse(
        (SAMPLES / f"convtranspose3d_softmax_{name}.csv").read_text())), "Version 2025.3.1.0", sandbox)
        for name, sandbox in (("eager", ""), ("tf32_igemm", "none (off)"))]


def test_the_terminal_table_has_every_kernel_a_total_and_the_ratio_of_the_sums():
    text = profile_view.terminal(_profiles())
    assert "convtranspose3d_softmax / eager: sum of kernel durations 2.8494 ms" in text
    assert "convtranspose3d_softmax / tf32_igemm: sum of kernel durations 0.3527 ms" in text
    assert "total: 7 kernel(s)" in text and "total: 4 kernel(s)" in text
    assert "tf32_igemm / eager: 0.124× the summed kernel time" in text
    for header, _, _ in profile_view.COLUMNS:
        assert header in text
    assert "convt3d_tf32_softmax_sigmoid" in text and "void <unnamed>" not in text


def _store(tmp_path):
    config = {**dataclasses.asdict(RunConfig()), "device": "cuda", "size": "full"}
    store = RunStore.create(tmp_path, {"environment": {"gpu": None}, "git": None, "config": config, "selection": {},
                                       "problems": {}})
    store.profiles = _profiles()
    store.finish()
    return store


def test_profiles_go_through_run_json_and_follow_the_schema(tmp_path):
    store = _store(tmp_path)
    doc, evaluations = load_run(store.directory)
    assert evaluations == [] and profiles_of(doc) == _profiles()
    schema.check(doc)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads((ROOT / "docs" / "run.schema.json").read_text()))
    assert RunStore.resume(store.directory).profiles == _profiles()


def test_a_run_file_without_profiles_has_none_and_a_malformed_one_is_refused(tmp_path):
    assert profiles_of({"run_id": "x"}) == []
    bad = {"run_id": "x", "profiles": [{"problem": "p", "solution": "s", "kernels": [{"name": "k"}]}]}
    with pytest.raises(Exception, match="malformed profile"):
        profiles_of(bad)


def test_the_html_report_has_a_section_per_profiled_model(tmp_path):
    store = _store(tmp_path)
    doc, evaluations = load_run(store.directory)
    page = report_html(doc, evaluations)
    assert 'id="profiles"' in page and 'id="profile-1"' in page
    assert "convtranspose3d_softmax / tf32_igemm" in page and "0.124× eager" in page
    assert "&lt;unnamed&gt;::convt3d_tf32_softmax_sigmoid" in page  # kernel names are text, escaped
    assert 'id="profiles"' not in report_html({**doc, "profiles": []}, evaluations)


def test_kbench_profile_without_ncu_says_so_in_one_line_and_exits_2(monkeypatch):
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    monkeypatch.setattr(ncu, "FALLBACKS", (Path("/nonexistent/ncu"),))
    monkeypatch.setattr(profile_command.toolkit, "find_cuda_home", lambda: None)
    result = CliRunner().invoke(app, ["profile", "-p", "convtranspose3d_softmax", "-s", "tf32_igemm"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("[error] ncu (Nsight Compute) was not found")


def test_kbench_profile_prints_the_tables_and_writes_the_run(tmp_path, monkeypatch, fake_ncu):
    monkeypatch.setattr(ncu.shutil, "which", lambda name: str(fake_ncu))
    monkeypatch.setattr(profile_command, "probe_environment",
                        lambda: {"gpu": {"name": "H100", "capability": [9, 0]}, "torch": "2.x", "cpu": "x"})
    monkeypatch.setattr(profile_command, "_build", lambda ctx, solution, progress: None)
    made = iter(_profiles())
    monkeypatch.setattr(profile_command, "profile_model", lambda *args: next(made))
    result = CliRunner().invoke(app, ["profile", "-p", "convtranspose3d_softmax", "-s", "tf32_igemm",
                                      "--results-dir", str(tmp_path), "--cache-dir", str(tmp_path / "cache"),
                                      "--problems-dir", str(ROOT / "problems"),
                                      "--solutions-dir", str(ROOT / "solutions")])
    assert result.exit_code == 0, result.output
    assert "tf32_igemm / eager: 0.124×" in result.output
    (run,) = [d for d in tmp_path.iterdir() if (d / "run.json").is_file()]
    doc, _ = load_run(run)
    assert [p.solution for p in profiles_of(doc)] == ["eager", "tf32_igemm"]
    assert doc["config"]["device"] == "cuda" and doc["selection"]["solutions"] == ["tf32_igemm"]
    assert (run / "report.html").is_file()


@pytest.mark.parametrize("args, words", [([], "one problem and one solution"),
                                         (["-p", "tiny"], "one problem and one solution"),
                                         (["-p", "tiny", "-s", "cpu_only"], "does not run on CUDA")])
def test_kbench_profile_wants_one_cuda_solution(tmp_path, monkeypatch, fake_ncu, args, words):
    monkeypatch.setattr(ncu.shutil, "which", lambda name: str(fake_ncu))
    solutions = tmp_path / "solutions" / "tiny"
    solutions.mkdir(parents=True)
    (solutions / "cpu_only.py").write_text((FIXTURES / "solutions" / "tiny" / "hangs.py").read_text())
    result = CliRunner().invoke(app, ["profile", *args, "--problems-dir", str(FIXTURES / "problems"),
                                      "--solutions-dir", str(tmp_path / "solutions")])
    assert result.exit_code == 2, result.output
    assert words in result.output
