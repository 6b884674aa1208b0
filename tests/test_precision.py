"""Precision modes (KernelBench's --precision), the solution's declared PRECISIONS, and the reference-noise check."""

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from kbench.results.findings import Finding, FindingCode, from_legacy
from kbench.cli import app
from kbench.errors import DiscoveryError
from kbench.judge.checks import noise
from kbench.judge.harness import build_reference, cast, input_maker, load_problem
from kbench.problems.discovery import find_problem, load_solution_file
from kbench.reports.compare import _key
from kbench.wire.jobs import ProblemRef
from kbench.results.records import Evaluation, Status
from kbench.config.tolerances import tolerance
from tests.conftest import FIXTURES

PROBLEMS, SOLUTIONS = FIXTURES / "problems", FIXTURES / "solutions"


def _run(tmp_path: Path, solutions: Path, *extra: str) -> tuple[int, str, dict]:
    out = tmp_path / "r"
    done = CliRunner().invoke(app, ["run", "-p", "tiny", "--problems-dir", str(PROBLEMS), "--solutions-dir",
                                    str(solutions), "--device", "cpu", "--no-compile-baseline", "--max-time", "0.05",
                                    "--trials", "2", "--results-dir", str(out), *extra])
    runs = sorted(out.iterdir()) if out.exists() else []
    return done.exit_code, done.output, json.loads((runs[-1] / "run.json").read_text()) if runs else {}


def test_cast_changes_floating_tensors_and_modules_only():
    model = cast(torch.nn.Linear(4, 4), "bf16")
    assert model.weight.dtype == torch.bfloat16
    assert cast(torch.ones(3), "fp16").dtype == torch.float16
    assert cast(torch.arange(3), "bf16").dtype == torch.int64  # integer inputs (labels, indices) stay as they are
    same = torch.ones(2)
    assert cast(same, "fp32") is same and cast(3, "bf16") == 3


def test_reference_and_inputs_are_built_in_the_precision():
    problem = load_problem(ProblemRef("tiny", str(PROBLEMS / "tiny" / "model.py")))
    reference, _ = build_reference(problem, 1, "cpu", "bf16")
    inputs = input_maker(problem, "cpu", "bf16")(1)
    assert all(p.dtype == torch.bfloat16 for p in reference.parameters())
    assert all(x.dtype == torch.bfloat16 for x in inputs if x.is_floating_point())
    assert reference(*inputs).dtype == torch.bfloat16


def test_the_problems_own_tolerance_is_at_least_1e_2_at_reduced_precision():
    assert tolerance("problem", "fp32", (1e-4, 1e-4)) == (1e-4, 1e-4)
    assert tolerance("problem", "bf16", (1e-4, 1e-4)) == (1e-2, 1e-2)
    assert tolerance("problem", "fp16", (5e-2, 1e-4)) == (5e-2, 1e-2)
    assert tolerance("problem", "bf16", (1e-4, 1e-4), (1e-3, None)) == (1e-3, 1e-2)  # explicit values still win


def test_problem_toml_declares_a_precision_and_a_wrong_one_is_named(tmp_path: Path):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "model.py").write_text("class Model: pass\ndef get_inputs(): pass\ndef get_init_inputs(): pass\n")
    (folder / "problem.toml").write_text('precision = "bf16"\n')
    assert find_problem("p", tmp_path).precision == "bf16"
    (folder / "problem.toml").write_text('precision = "fp8"\n')
    with pytest.raises(DiscoveryError, match=r"precision 'fp8' is not one of fp32, fp16, bf16"):
        find_problem("p", tmp_path)


def test_a_solution_declares_its_precisions(tmp_path: Path):
    path = tmp_path / "s.py"
    path.write_text("PRECISIONS = ('fp32', 'bf16')\nclass ModelNew: pass\n")
    assert load_solution_file(path, "tiny").precisions == ("fp32", "bf16")
    path.write_text("class ModelNew: pass\n")
    assert load_solution_file(path, "tiny").precisions == ("fp32", "fp16", "bf16")
    path.write_text("PRECISIONS = ('fp64',)\nclass ModelNew: pass\n")
    with pytest.raises(DiscoveryError, match="PRECISIONS lists"):
        load_solution_file(path, "tiny")


def test_a_bf16_run_casts_both_sides_records_the_precision_and_skips_undeclared_solutions(tmp_path: Path):
    folder = tmp_path / "s" / "tiny"
    folder.mkdir(parents=True)
    good = (SOLUTIONS / "tiny" / "good.py").read_text()
    (folder / "good.py").write_text(good)
    (folder / "fp32_only.py").write_text("PRECISIONS = ('fp32',)\n" + good)
    # Returns float32 whatever it is given: wrong dtype at bf16.
    body = "self.scale * torch.tanh(x @ self.linear.weight.t() + self.linear.bias)"
    (folder / "upcasts.py").write_text(good.replace(f"return {body}", f"return ({body}).float()"))
    code, output, doc = _run(tmp_path, tmp_path / "s", "--precision", "bf16")
    rows = {r["solution"]: r for r in doc["evaluations"]}
    assert {r["precision"] for r in rows.values()} == {"bf16"}
    assert doc["config"]["precision"] == "bf16" and doc["problems"]["tiny"]["precision"] == "bf16"
    assert (doc["problems"]["tiny"]["atol"], doc["problems"]["tiny"]["rtol"]) == (1e-2, 1e-2)  # the problem says 1e-4
    assert rows["eager"]["status"] == "correct" and rows["good"]["status"] == "correct", output
    assert rows["fp32_only"]["status"] == "not_run"
    assert "declares PRECISIONS fp32; this run is in bf16" in rows["fp32_only"]["message"]
    assert rows["upcasts"]["status"] == "incorrect" and "dtype" in rows["upcasts"]["message"]
    assert code == 1  # upcasts is incorrect
    assert "bf16" in output  # the precision column


def test_compare_never_matches_rows_of_two_precisions():
    class Run:
        doc = {"config": {"math": {"cudnn_tf32": True}}}

    fp32 = Evaluation(problem="p", solution="s", status=Status.CORRECT, device="cuda", size="full")
    bf16 = Evaluation(problem="p", solution="s", status=Status.CORRECT, device="cuda", size="full", precision="bf16")
    assert _key(fp32, Run()) != _key(bf16, Run())
    assert Evaluation.from_json({**fp32.to_json(), "precision": "bf16"}).precision == "bf16"
    old = fp32.to_json()
    del old["precision"]  # run.json from before precisions: fp32
    assert Evaluation.from_json(old).precision == "fp32"


class Summed(torch.nn.Module):
    """x + 1e4 - 1e4: in float32 the sum keeps about 3 decimals of x, so the result is up to 5e-4 from x."""

    def forward(self, x):
        return (x + 1e4) - 1e4


def test_the_noise_check_finds_a_tolerance_below_the_references_own_rounding():
    x = torch.rand(4, 1000)
    out = Summed()(x)
    figures, warnings = noise.reference_noise(Summed(), [x], out, "cpu", "fp32", 1e-5, 1e-5, tf32=False)
    assert figures.exact_passes is False and figures.max_abs > 1e-4
    assert figures.cause == "float32 rounding in the library's algorithms"
    assert warnings and warnings[0].code == FindingCode.TOLERANCE_BELOW_NOISE
    figures, warnings = noise.reference_noise(Summed(), [x], out, "cpu", "fp32", 1e-2, 1e-2, tf32=False)
    assert figures.exact_passes is True and warnings == []
    xb = x.bfloat16()
    figures, warnings = noise.reference_noise(Summed(), [xb], Summed()(xb), "cpu", "bf16", 1e-2, 1e-2, tf32=False)
    assert figures.cause == "bf16 arithmetic" and warnings


def test_the_noise_check_is_skipped_not_failed_when_it_cannot_run():
    class NoDouble(torch.nn.Module):
        def forward(self, x):
            if x.dtype == torch.float64:
                raise RuntimeError("no float64 kernel")
            return x * 2

    x = torch.rand(8)
    figures, warnings = noise.reference_noise(NoDouble(), [x], x * 2, "cpu", "fp32", 1e-4, 1e-4, tf32=False)
    assert figures is None and warnings[0].text.startswith("[check_skipped] the reference-noise check could not run")


def test_list_check_reports_the_noise_per_precision():
    result = CliRunner().invoke(app, ["list", "--check", "--device", "cpu", "-p", "tiny", "--precision", "fp32",
                                      "--precision", "bf16", "--problems-dir", str(PROBLEMS), "--solutions-dir",
                                      str(SOLUTIONS)])
    assert result.exit_code == 0, result.output
    table = result.output.split("ref err vs fp64", 1)[1]
    assert "fp32" in table and "bf16" in table
    bad = CliRunner().invoke(app, ["list", "--check", "--device", "cpu", "-p", "tiny", "--precision", "fp8",
                                   "--problems-dir", str(PROBLEMS), "--solutions-dir", str(SOLUTIONS)])
    assert bad.exit_code == 2 and "fp8" in bad.output


def test_the_report_gives_each_problems_reference_noise_beside_its_tolerance():
    from kbench.reports.report_text import markdown

    from kbench.results.diagnostics import Diagnostics, ReferenceNoise

    noise = ReferenceNoise("fp32", 1e-4, 1e-4, 2.8e-3, False,
                           "TF32, on in this run for cuDNN or matmul; --no-tf32 turns it off")
    rows = [Evaluation(problem="p", solution="eager", status=Status.CORRECT, device="cuda", size="full",
                       diagnostics=Diagnostics(noise=noise)),
            Evaluation(problem="q", solution="eager", status=Status.CORRECT, device="cuda", size="full")]
    text = " ".join(markdown({"environment": {}}, rows).split())  # the line is wrapped within 120 columns
    assert ("Reference at fp32 against float64: max error 0.0028 at atol=0.0001, rtol=0.0001; an exact result fails: "
            "only the library's rounding passes (TF32") in text
    assert text.count("Reference at") == 1  # q has no noise figures (an older run, or the check was skipped)
