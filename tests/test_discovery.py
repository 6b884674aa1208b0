from pathlib import Path

import pytest

from kbench.errors import DiscoveryError
from kbench.problems.discovery import find_problem, find_solutions, list_problems, list_solutions, select
from tests.conftest import ROOT

SHIPPED = {"conv3d_logsumexp", "conv3d_gelu", "convtranspose3d_layernorm", "convtranspose3d_softmax"}


def test_shipped_problems_are_found_with_their_metadata():
    problems = {p.name: p for p in list_problems(ROOT / "problems")}
    assert set(problems) == SHIPPED
    lse = problems["conv3d_logsumexp"]
    assert dict(lse.constants)["batch_size"] == 4 and dict(lse.constants)["width"] == 128
    assert lse.overrides("small")["batch_size"] == 2 and lse.overrides("full")["batch_size"] == 4
    assert set(lse.overrides("full")) == set(lse.overrides("small"))  # explicit values for every size constant that differs
    assert problems["convtranspose3d_softmax"].atol == 1e-4
    assert "#43" in lse.origin


def test_every_shipped_problem_has_a_cpu_and_a_cuda_solution():
    for name in SHIPPED:
        devices = {d for s in list_solutions(name, ROOT / "solutions") for d in s.devices}
        assert {"cpu", "cuda"} <= devices, name


def test_unknown_problem_lists_the_known_ones():
    with pytest.raises(DiscoveryError, match="Unknown problem 'nope'. Available: conv3d_gelu, conv3d_logsumexp"):
        find_problem("nope", ROOT / "problems")


def test_unknown_solution_lists_the_known_ones(fixture_dirs):
    problems_dir, solutions_dir = fixture_dirs
    tiny = find_problem("tiny", problems_dir)
    with pytest.raises(DiscoveryError, match="Unknown solution 'nope' for problem 'tiny'. Available: .*good"):
        find_solutions(tiny, ["nope"], solutions_dir)


def test_discovery_imports_no_user_code(tmp_path: Path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "model.py").write_text(
        "raise SystemExit('imported!')\nclass Model: pass\ndef get_inputs(): pass\ndef get_init_inputs(): pass\nn = 3\n"
    )
    (tmp_path / "s" / "p").mkdir(parents=True)
    (tmp_path / "s" / "p" / "sol.py").write_text("raise SystemExit('imported!')\nDEVICES = ('cpu',)\n")
    problem = find_problem("p", tmp_path)
    assert dict(problem.constants) == {"n": 3}
    assert [s.devices for s in list_solutions("p", tmp_path / "s")] == [("cpu",)]


def test_a_kernelbench_file_path_is_a_problem(tmp_path: Path):
    path = tmp_path / "43_Conv3d_Max_LogSumExp_ReLU.py"
    path.write_text((ROOT / "problems" / "conv3d_logsumexp" / "model.py").read_text())
    problem = find_problem(str(path), tmp_path / "elsewhere")
    assert problem.name == "43_Conv3d_Max_LogSumExp_ReLU"
    assert (problem.atol, problem.rtol, problem.small) == (1e-2, 1e-2, ())


def test_a_file_that_breaks_the_contract_is_refused(tmp_path: Path):
    path = tmp_path / "bad.py"
    path.write_text("class Model: pass\n")
    with pytest.raises(DiscoveryError, match="does not define get_init_inputs, get_inputs"):
        find_problem(str(path), tmp_path)


def test_small_sizes_must_name_real_constants(tmp_path: Path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "model.py").write_text("class Model: pass\ndef get_inputs(): pass\ndef get_init_inputs(): pass\nn = 3\n")
    (tmp_path / "p" / "problem.toml").write_text("[small]\nm = 1\n")
    with pytest.raises(DiscoveryError, match=r"\[small\] names m"):
        find_problem("p", tmp_path)


def test_solution_without_devices_is_cuda_only_and_bad_devices_are_refused(tmp_path: Path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.py").write_text("x = 1\n")
    (tmp_path / "p" / "b.py").write_text("DEVICES = ('tpu',)\n")
    with pytest.raises(DiscoveryError, match="DEVICES lists"):
        list_solutions("p", tmp_path)
    (tmp_path / "p" / "b.py").unlink()
    assert list_solutions("p", tmp_path)[0].devices == ("cuda",)


def test_select_needs_one_problem_for_a_named_solution():
    with pytest.raises(DiscoveryError, match="--solution needs exactly one --problem"):
        select([], ["cuda_fused"], ROOT / "problems", ROOT / "solutions")
    problems, solutions = select(["conv3d_gelu"], ["cpu_fused"], ROOT / "problems", ROOT / "solutions")
    assert [p.name for p in problems] == ["conv3d_gelu"]
    assert [s.name for s in solutions["conv3d_gelu"]] == ["cpu_fused"]


def test_several_named_solutions_are_each_chosen_in_order_and_none_twice(fixture_dirs):
    problems_dir, solutions_dir = fixture_dirs
    _, solutions = select(["tiny"], ["wrong_values", str(solutions_dir / "tiny" / "good.py")], problems_dir,
                          solutions_dir)
    assert [s.name for s in solutions["tiny"]] == ["wrong_values", "good"]
    with pytest.raises(DiscoveryError, match="A solution is named twice for problem 'tiny': good"):
        select(["tiny"], ["good", "exits", str(solutions_dir / "tiny" / "good.py")], problems_dir, solutions_dir)


def test_an_unknown_problem_toml_key_is_an_error_naming_it(tmp_path: Path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "model.py").write_text("class Model: pass\ndef get_inputs(): pass\ndef get_init_inputs(): pass\n")
    (tmp_path / "p" / "problem.toml").write_text("atol = 1e-3\nrtoll = 1e-3\n")  # a typo: rtol would stay 1e-2
    with pytest.raises(DiscoveryError, match=r"problem.toml: unknown key rtoll; the keys are origin, atol, rtol, small"):
        find_problem("p", tmp_path)
    (tmp_path / "p" / "problem.toml").write_text("atol = 1e-3\nrtol = 1e-3\n")
    assert find_problem("p", tmp_path).rtol == 1e-3


def test_tolerance_profiles_explicit_values_win_then_the_profile_then_the_problem():
    from kbench.config.tolerances import tolerance

    problem = (1e-2, 1e-3)
    assert tolerance("problem", "fp32", problem) == (1e-2, 1e-3)
    assert tolerance("kernelbench", "fp32", problem) == (1e-4, 1e-4)
    assert tolerance("kernelbench", "bf16", problem) == (1e-2, 1e-2)
    assert tolerance("kernelbench-v0.1", "fp32", problem) == (1e-2, 1e-2)
    assert tolerance("kernelbench", "fp32", problem, (5e-3, None)) == (5e-3, 1e-4)


def test_a_run_uses_and_records_its_tolerance_profile(tmp_path: Path):
    import json

    from typer.testing import CliRunner

    from kbench.cli import app
    from tests.conftest import FIXTURES

    args = ["run", "-p", "tiny", "-s", "good", "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir",
            str(FIXTURES / "solutions"), "--device", "cpu", "--no-compile-baseline", "--max-time", "0.05",
            "--trials", "1", "--results-dir", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c")]
    done = CliRunner().invoke(app, [*args, "--tolerance", "kernelbench-v0.1"])
    assert done.exit_code == 0, done.output
    (run_dir,) = (tmp_path / "r").iterdir()
    doc = json.loads((run_dir / "run.json").read_text())
    assert doc["config"]["tolerance"] == "kernelbench-v0.1"
    assert (doc["problems"]["tiny"]["atol"], doc["problems"]["tiny"]["rtol"]) == (1e-2, 1e-2)  # the problem says 1e-4
    assert (doc["problems"]["tiny"]["problem_atol"], doc["problems"]["tiny"]["problem_rtol"]) == (1e-4, 1e-4)
    bad = CliRunner().invoke(app, [*args, "--tolerance", "loose"])
    assert bad.exit_code == 2 and "Unknown tolerance profile 'loose'" in bad.output


def test_the_profile_decides_the_verdict(tmp_path: Path):
    """Off by 5e-3 everywhere: incorrect at the problem's 1e-4, correct at kernelbench-v0.1's 1e-2."""
    import json

    from typer.testing import CliRunner

    from kbench.cli import app
    from tests.conftest import FIXTURES

    folder = tmp_path / "s" / "tiny"
    folder.mkdir(parents=True)
    good = (FIXTURES / "solutions" / "tiny" / "good.py").read_text()
    (folder / "close.py").write_text(good.replace("return self.scale *", "return 0.005 + self.scale *"))
    verdicts = {}
    for profile in ("problem", "kernelbench-v0.1"):
        out = tmp_path / profile
        CliRunner().invoke(app, ["run", "-p", "tiny", "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir",
                                 str(tmp_path / "s"), "--device", "cpu", "--no-compile-baseline", "--max-time", "0.05",
                                 "--trials", "1", "--results-dir", str(out), "--tolerance", profile])
        (run_dir,) = out.iterdir()
        rows = json.loads((run_dir / "run.json").read_text())["evaluations"]
        verdicts[profile] = next(r["status"] for r in rows if r["solution"] == "close")
    assert verdicts == {"problem": "incorrect", "kernelbench-v0.1": "correct"}


def test_a_solution_that_is_not_utf8_is_a_defect_and_one_that_declares_its_encoding_is_not(tmp_path: Path):
    """Python reads a source as UTF-8 unless it declares another encoding (PEP 263): discovery reads it the same way,
    and a file Python could not read is its own load_error, never the end of the run."""
    from kbench.problems.discovery import list_solutions

    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "latin.py").write_bytes(b"# caf\xe9\nclass ModelNew:\n    pass\n")
    (folder / "declared.py").write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\nclass ModelNew:\n    pass\n")
    found = {s.name: s for s in list_solutions("p", tmp_path)}
    assert "not UTF-8 text" in found["latin"].defect and "0xe9" in found["latin"].defect
    assert found["declared"].defect == ""


def test_a_run_over_a_folder_with_a_non_utf8_solution_records_it_as_a_load_error(tmp_path: Path):
    from typer.testing import CliRunner

    from kbench.cli import app
    from kbench.results.records import Status
    from kbench.results.storage import load_run
    from tests.conftest import FIXTURES

    folder = tmp_path / "s" / "tiny"
    folder.mkdir(parents=True)
    (folder / "mojibake.py").write_bytes(b"\xff\xfeclass ModelNew: pass\n")
    done = CliRunner().invoke(app, ["run", "-p", "tiny", "--problems-dir", str(FIXTURES / "problems"),
                                    "--solutions-dir", str(tmp_path / "s"), "--device", "cpu", "--no-compile-baseline",
                                    "--max-time", "0.05", "--trials", "1", "--results-dir", str(tmp_path / "r"),
                                    "--no-progress"])
    assert done.exit_code == 1 and "Traceback" not in done.output, done.output
    (run_dir,) = (tmp_path / "r").iterdir()
    row = next(e for e in load_run(run_dir)[1] if e.solution == "mojibake")
    assert row.status == Status.LOAD_ERROR and "not UTF-8 text" in row.message
