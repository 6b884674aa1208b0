"""Degeneracy checks: whether a problem's outputs can tell a right answer from a wrong one at its tolerance."""

from __future__ import annotations

from typing import Any

import torch

from kbench.judge.checks.comparison import Figures, chunk_elements, chunks, compare, flatten_outputs, memory_budget
from kbench.results.diagnostics import Degeneracy
from kbench.results.findings import Finding, FindingCode

# Bound at import, before any solution runs (see kbench.judge.checks.comparison).
_eq = torch.eq
_count_nonzero = torch.count_nonzero
_stack = torch.stack
_float64 = torch.float64

DEGENERATE_ZERO_SHARE = 0.5


def _moments(t: torch.Tensor, size: int) -> tuple[float, float, float]:
    """Mean, standard deviation and share of exact zeros of a tensor, in float64 a chunk at a time."""
    n = t.numel()
    if n == 0:
        return 0.0, 0.0, 0.0
    sums = []
    for chunk in chunks(t, size):
        c = chunk.to(_float64)
        sums.append(_stack([c.sum(), (c * c).sum(), _count_nonzero(_eq(c, 0)).to(_float64)]))
    total, squares, zeros = _stack(sums).sum(0).tolist()  # one sync
    mean = total / n
    var = max(squares - n * mean * mean, 0.0) / (n - 1) if n > 1 else 0.0
    return mean, var ** 0.5, zeros / n


def degenerate_findings(first: Any, second: Any, atol: float, rtol: float) -> tuple[list[Finding], Degeneracy]:
    """Is this problem able to tell a right answer from a wrong one at its tolerance?

    `first` and `second` are reference outputs for two different input seeds. Findings: a constant
    tensor (the mean) passes; outputs for different inputs agree within tolerance; most outputs are zero.
    """
    out1, out2 = flatten_outputs(first)[0].detach(), flatten_outputs(second)[0].detach()
    size = chunk_elements(memory_budget(out1.device))
    mean, std, zero_share = _moments(out1, size)
    constant = Figures()
    for chunk in chunks(out1, size):
        constant.add(mean, chunk.to(_float64), atol, rtol)
    seeds_ok = out1.shape == out2.shape and compare(out2, out1, atol, rtol)[0]
    n, mismatched = max(constant.numel, 1), constant.mismatched
    figures = Degeneracy(constant_pass_share=1 - mismatched / n, zero_share=zero_share, output_std=std)
    findings = []
    if constant.numel and mismatched == 0:
        findings.append(Finding(FindingCode.DEGENERATE_CONSTANT,
                                f"a constant tensor (the output's mean) passes at atol={atol:g}, rtol={rtol:g}"))
    if seeds_ok:
        findings.append(Finding(FindingCode.DEGENERATE_INPUTS,
                                "outputs for two different input seeds agree within the tolerance"))
    if zero_share > DEGENERATE_ZERO_SHARE:
        findings.append(Finding(FindingCode.DEGENERATE_ZEROS, f"{zero_share:.0%} of the outputs are exactly zero"))
    return findings, figures
