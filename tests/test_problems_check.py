"""The shipped problems can tell right from wrong: a constant fails each one (degenerate check, CPU size)."""

import pytest
from typer.testing import CliRunner

from kbench.cli import app
from kbench.commands.build_and_check import check_problems
from kbench.judge.checks.degeneracy import degenerate_findings
from tests.conftest import ROOT


def test_each_shipped_problem_is_clean_at_its_tolerance():
    checks = check_problems([], ROOT / "problems", "cpu", "small", 300)
    assert len(checks) == 4
    for check in checks:
        assert check.error == "" and check.findings == (), (check.problem.name, check.findings)
        assert check.output.degeneracy.constant_pass_share < 1.0  # so a constant output is incorrect


def test_a_near_constant_output_like_softmax_sigmoid_is_degenerate_at_1e_2():
    """Why convtranspose3d_softmax declares 1e-4: its outputs are about 0.504 +- 3e-4."""
    import torch

    torch.manual_seed(0)
    out = 0.504 + 3e-4 * torch.randn(1000)
    findings, _ = degenerate_findings(out, 0.504 + 3e-4 * torch.randn(1000), 1e-2, 1e-2)
    assert {f.code for f in findings} == {"degenerate_constant", "degenerate_inputs"}


def test_degenerate_zeros_are_found():
    import torch

    findings, figures = degenerate_findings(torch.zeros(10), torch.zeros(10), 1e-2, 1e-2)
    assert figures.zero_share == 1.0 and any(f.code == "degenerate_zeros" for f in findings)


def test_list_check_prints_the_table():
    result = CliRunner().invoke(app, ["list", "--check", "--device", "cpu", "-p", "conv3d_gelu",
                                      "--problems-dir", str(ROOT / "problems"), "--solutions-dir", str(ROOT / "solutions")])
    assert result.exit_code == 0, result.output
    assert "constant passes" in result.output and "clean" in result.output
